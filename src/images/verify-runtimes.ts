import { runtimeArgv } from "../runtimes/table.js";
import type { Manifest } from "./manifest.js";
import { IN_IMAGE } from "../runtimes/in-image.js";
import { checkInRootfs } from "./rootfs-exec.js";
import { installedPackages } from "./wheelhouse.js";

const CHECK_PY312 =
  "import ssl, sqlite3, ctypes, zlib, bz2, lzma, json, decimal, hashlib, readline, curses, uuid, platform\n" +
  "print(platform.python_version())";
/** The data stack works: the product page's imports, and a plot saved as PNG by the Agg backend. */
const CHECK_STACK =
  "import platform, numpy, scipy.linalg, pandas, PIL, matplotlib\n" +
  "import matplotlib.pyplot as plt\n" +
  "assert matplotlib.get_backend().lower() == 'agg', matplotlib.get_backend()\n" +
  "plt.plot([0, 1], [1, 0]); plt.savefig('/tmp/check.png')\n" +
  "assert open('/tmp/check.png', 'rb').read(8) == b'\\x89PNG\\r\\n\\x1a\\n'\n" +
  "print(platform.python_version())";

/**
 * Every public top-level module of every installed distribution imports (a package whose wheel
 * lacks a library, or whose slimming went too far, fails here and fails the build).
 */
export const CHECK_IMPORTS =
  "import importlib, importlib.metadata as md\n" +
  "mods = sorted({m for m in md.packages_distributions() if not m.startswith('_') and m.isidentifier()})\n" +
  "bad = []\n" +
  "for m in mods:\n" +
  "    try: importlib.import_module(m)\n" +
  "    except Exception as e: bad.append(f'{m}: {type(e).__name__}: {e}')\n" +
  "assert not bad, bad\n" +
  "print(len(mods))";

/**
 * Runs every interpreter inside the read-only image and records what it reports; `py312Stack`,
 * `py313Stack`: that Python got the lock's stack, and it must work as python3.11's does.
 */
export async function verifyRuntimes(
  rootfs: string,
  stacks: { py312Stack?: boolean; py313Stack?: boolean } = {},
): Promise<Manifest["runtimes"]> {
  const run = (argv: string[]) => checkInRootfs({ rootfs, argv }).then((s) => s.trim());
  const copied = async (runtime: "python3.12" | "python3.13", stack: boolean) => {
    const version = await run([...runtimeArgv(runtime), "-c", CHECK_PY312]);
    if (stack) {
      await run([...runtimeArgv(runtime), "-c", CHECK_STACK]);
      await run([...runtimeArgv(runtime), "-c", CHECK_IMPORTS]);
    }
    return version;
  };
  const py312 = await copied("python3.12", stacks.py312Stack ?? false);
  const py313 = await copied("python3.13", stacks.py313Stack ?? false);
  const py311 = await run([...runtimeArgv("python3.11"), "-c", CHECK_STACK]);
  const node = await run([...runtimeArgv("node20"), "--version"]);
  const node24 = await run([...runtimeArgv("node24"), "--version"]);
  const bash = await run([...runtimeArgv("bash"), "-c", 'echo "$BASH_VERSION"']);
  if (!node.startsWith("v20.")) throw new Error(`node in the image reports ${node}, not v20`);
  if (!node24.startsWith("v24.")) throw new Error(`node24 in the image reports ${node24}, not v24`);
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
    "python3.13": {
      argv: runtimeArgv("python3.13"),
      version: py313,
      packages: await installedPackages(rootfs, IN_IMAGE.python313),
    },
    node20: { argv: runtimeArgv("node20"), version: node },
    node24: { argv: runtimeArgv("node24"), version: node24 },
    bash: { argv: runtimeArgv("bash"), version: bash },
  };
}
