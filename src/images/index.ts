// The runtime image's public surface: find the built image, build it, and the command per runtime.
export { buildRootfs, type BuildOptions, type BuildResult } from "./build.js";
export {
  BUILD_COMMAND,
  findRootfs,
  locateRootfs,
  type FindResult,
  type LocatedRootfs,
} from "./locate.js";
export { parseManifest, type Manifest, type RuntimeInfo } from "./manifest.js";
export { IMAGE_ENV, IN_IMAGE } from "../runtimes/in-image.js";
export { runtimeArgv } from "../runtimes/table.js";
