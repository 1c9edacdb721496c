// Builds the microVM guest: kernel (ELF vmlinux from /boot/vmlinuz-*-cloud-amd64), initramfs
// (busybox, modules, guest/init, build/guest/agent) and the erofs root disk of the current runtime
// image, then removes older artifacts and disks nothing uses. Needs `npm run build` first (it
// uses dist/). Prints the paths as JSON.
// Usage: node scripts/build-vm.mjs [--rootfs DIR]
import { buildVmArtifacts, ensureRootDisk, pruneVmCache } from "../dist/src/images/vm/build.js";
import { selectRootfs } from "../dist/src/images/locate.js";
import { settingsFrom } from "../dist/src/schema/settings/values.js";

const { images } = settingsFrom(process.env);
const cacheRoot = images.vmCache;

// The image a server would serve: the current recipe's, or the last one built when only the
// image config is unbuilt or bad (src/images/locate.ts).
const i = process.argv.indexOf("--rootfs");
const selected = i > 0 ? null : selectRootfs(images);
const rootfsDir = i > 0 ? process.argv[i + 1] : selected?.ok ? selected.dir : undefined;
try {
  const artifacts = buildVmArtifacts({ cacheRoot });
  const disk = rootfsDir ? ensureRootDisk(rootfsDir, cacheRoot) : null;
  // What earlier versions built and nothing uses any more (see pruneVmCache for what is spared).
  const pruned = disk ? pruneVmCache([artifacts.kernel, disk], cacheRoot) : [];
  console.log(JSON.stringify({ ...artifacts, disk, pruned }, null, 2));
  if (!disk)
    console.error("build-vm: no runtime image yet (node scripts/build-images.mjs); disk skipped");
} catch (err) {
  console.error(`build-vm: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
}
