// The runtime image's public surface: find the built image, build it, and the command per runtime.
export { buildRootfs, type BuildOptions, type BuildResult } from "./build.js";
export {
  BUILD_COMMAND,
  findRootfs,
  locateRootfs,
  type FindResult,
  type LocatedRootfs,
} from "./locate.js";
export {
  IMAGE_ENV,
  parseManifest,
  runtimeArgv,
  type Manifest,
  type RuntimeInfo,
} from "./manifest.js";
export { IN_IMAGE, imagesDir } from "./paths.js";
