import { runtimeArgv, type Manifest } from "./manifest.js";
import { IN_IMAGE } from "./paths.js";
import { checkInRootfs } from "./rootfs-exec.js";
import { installedPackages } from "./wheelhouse.js";

const CHECK_PY312 =
  "import ssl, sqlite3, ctypes, zlib, bz2, lzma, json, decimal, hashlib, readline, curses, uuid, platform\n" +
  "print(platform.python_version())";
const CHECK_PY311 =
  "import platform, numpy, scipy.linalg, pandas, PIL, matplotlib\n" +
  "import matplotlib.pyplot as plt\n" +
  "assert matplotlib.get_backend().lower() == 'agg', matplotlib.get_backend()\n" +
  "plt.plot([0, 1], [1, 0]); plt.savefig('/tmp/check.png')\n" +
  "assert open('/tmp/check.png', 'rb').read(8) == b'\\x89PNG\\r\\n\\x1a\\n'\n" +
  "print(platform.python_version())";

/** Runs every interpreter inside the read-only image and records what it reports. */
export async function verifyRuntimes(rootfs: string): Promise<Manifest["runtimes"]> {
  const run = (argv: string[]) => checkInRootfs({ rootfs, argv }).then((s) => s.trim());
  const py312 = await run([...runtimeArgv("python3.12"), "-c", CHECK_PY312]);
  const py311 = await run([...runtimeArgv("python3.11"), "-c", CHECK_PY311]);
  const node = await run([...runtimeArgv("node20"), "--version"]);
  const bash = await run([...runtimeArgv("bash"), "-c", 'echo "$BASH_VERSION"']);
  if (!node.startsWith("v20.")) throw new Error(`node in the image reports ${node}, not v20`);
  return {
    "python3.12": {
      argv: runtimeArgv("python3.12"),
      version: py312,
      packages: await installedPackages(rootfs, IN_IMAGE.python312),
    },
    "python3.11": {
      argv: runtimeArgv("python3.11"),
      version: py311,
      packages: await installedPackages(rootfs, IN_IMAGE.python311),
    },
    node20: { argv: runtimeArgv("node20"), version: node },
    bash: { argv: runtimeArgv("bash"), version: bash },
  };
}
