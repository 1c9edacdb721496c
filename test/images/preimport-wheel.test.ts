import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { NamespaceBackend } from "../../src/backends/namespace/backend.js";
import { flavourFor } from "../../src/engine/preimport-route.js";
import { toAgentRequest } from "../../src/engine/request.js";
import { copyTree } from "../../src/images/copy-tree.js";
import { IN_IMAGE } from "../../src/runtimes/in-image.js";
import { preimportFor, type Preimport } from "../../src/images/preimport.js";
import { installedPackages, installWheelhouse } from "../../src/images/wheelhouse.js";
import { parseExecRequest } from "../../src/schema/validate.js";
import { WORKDIR } from "../../src/schema/limits.js";
import { AGENT_DIR } from "../../src/compose/engine-factory.js";
import { assertNoLeaks, snapshot } from "../helpers/leaks.js";
import { requireImage } from "./built-image.js";
import { writeWheel } from "./wheel-fixture.js";

/**
 * The pre-import is runtime-generic: python3.12 pre-imports as soon as its image has a package
 * the pre-import list names. This host's python3.12 has the standard library only (no PyPI), so a
 * fixture wheel is installed into a copy of the image (hard links, with a real copy of
 * /opt/python3.12) through the build's own wheelhouse install; the copy's package list, read as
 * the build reads it, goes through the same preimportFor() (the table plus one entry naming the
 * fixture), and a namespace backend over the copy serves python3.12 calls from jails whose
 * pre-started 3.12 imported it.
 */
const PROBE = [
  "import os, random",
  "IMPORT_CWD = os.getcwd()",
  "TOKEN = random.random()",
  "os.makedirs(os.path.expanduser('~/.cache/scratchrun-probe'), exist_ok=True)",
  "",
].join("\n");

const REPORT = [
  "import scratchrun_probe",
  "import json, os, random, sys, warnings",
  "a = open('/proc/self/cmdline', 'rb').read().split(b'\\0')",
  "def tree(root):",
  "    return sorted(os.path.join(d, n) for d, ds, fs in os.walk(root) for n in ds + fs)",
  "print(json.dumps({",
  "  'who': 'preimported' if len(a) > 3 and a[2].startswith(b'modules=') else 'prestarted' if a[1].endswith(b'prestart.py') else 'fresh',",
  "  'version': list(sys.version_info[:2]), 'import_cwd': scratchrun_probe.IMPORT_CWD,",
  "  'token': scratchrun_probe.TOKEN, 'random': random.random(),",
  "  'same': {'globals': sorted(k for k in globals() if k.startswith('__')), 'name': __name__,",
  "    'argv': sys.argv, 'path': sys.path, 'cwd': os.getcwd(), 'env': dict(os.environ),",
  "    'files': tree('/home/user') + tree('/tmp'), 'fds': sorted(os.listdir('/proc/self/fd')),",
  "    'warnings': [repr(f) for f in warnings.filters]},",
  "}))",
].join("\n");

interface Report {
  who: string;
  version: number[];
  import_cwd: string;
  token: number;
  random: number;
  same: Record<string, unknown>;
}

describe("python3.12 pre-imports what a wheel put in its image", () => {
  const base = snapshot();
  const tmp = mkdtempSync(join(tmpdir(), "scratchrun-preimport-wheel-"));
  const rootfs = join(tmp, "rootfs");
  let pre: Preimport | null = null;
  let backend: NamespaceBackend;

  before(async () => {
    const image = requireImage();
    chmodSync(tmp, 0o755); // the jails' uids must reach the copy
    // Hard links of the image (read-only in every jail), but /opt/python3.12 copied: pip writes it.
    execFileSync("cp", ["-al", image.dir, rootfs]);
    rmSync(join(rootfs, IN_IMAGE.python312Prefix), { recursive: true, force: true });
    await copyTree(
      join(image.dir, IN_IMAGE.python312Prefix),
      join(rootfs, IN_IMAGE.python312Prefix),
    );
    const wheels = join(tmp, "wheels");
    mkdirSync(wheels);
    writeWheel(wheels, {
      name: "scratchrun_probe",
      version: "0.1",
      files: { "scratchrun_probe/__init__.py": PROBE },
    });
    await installWheelhouse({ rootfs }, wheels);
    const packages = await installedPackages(rootfs, IN_IMAGE.python312);
    // The probe's entry alone: the image's python3.12 has the lock's stack too, whose
    // pre-imports (and the state they leave) are test/e2e/preimport.test.ts's to compare.
    pre = preimportFor({ ...image.manifest.runtimes["python3.12"], packages }, WORKDIR, [
      {
        distribution: "scratchrun-probe",
        modules: ["scratchrun_probe"],
        env: ["SCRATCHRUN_PROBE_"],
      },
    ]);
    backend = new NamespaceBackend({
      rootfsDir: rootfs,
      agentDir: AGENT_DIR,
      poolSizes: { "python3.12": 1 },
      ...(pre ? { preimport: { "python3.12": pre } } : {}),
    });
    await backend.pool.whenFull();
  });

  after(async () => {
    await backend?.close();
    rmSync(tmp, { recursive: true, force: true });
    await assertNoLeaks(base);
  });

  async function call(code: string, env: Record<string, string> = {}): Promise<Report> {
    await backend.pool.whenFull();
    const req = parseExecRequest({ runtime: "python3.12", code, network: "none", env });
    const out = await backend.run(
      {
        runtime: "python3.12",
        memoryMb: req.memory_mb,
        egress: { kind: "none" },
        request: toAgentRequest(req, backend.codeIds),
        flavour: flavourFor(req, pre ?? undefined),
      },
      { signal: new AbortController().signal },
    );
    assert.equal(out.agent.exit?.reason, "exited", Buffer.from(out.agent.stderr).toString());
    assert.equal(out.agent.exit?.value, 0, Buffer.from(out.agent.stderr).toString());
    return JSON.parse(Buffer.from(out.agent.stdout).toString()) as Report;
  }

  test("the copy's python3.12 package list names the probe, so its pre-import list does", () => {
    assert.deepEqual(pre?.modules, ["scratchrun_probe"]);
    assert.ok(pre?.env.includes("SCRATCHRUN_PROBE_"));
  });

  test("a call importing it runs in a python3.12 that imported it before the call, as a plain run", async () => {
    const got = await call(REPORT);
    const plain = await call(`pass\n${REPORT}`);
    assert.equal(got.who, "preimported");
    assert.deepEqual(got.version, [3, 12]);
    assert.equal(got.import_cwd, "/", "imported at the pre-start, before the call's chdir");
    assert.equal(plain.who, "prestarted");
    assert.equal(plain.import_cwd, "/home/user");
    // The directory its import makes is there (made again at the hand-over), nothing else.
    assert.deepEqual(got.same, plain.same);
    assert.ok((got.same.files as string[]).includes("/home/user/.cache/scratchrun-probe"));
  });

  test("each call has random state of its own, and a variable its import reads means a fresh interpreter", async () => {
    const a = await call(REPORT);
    const b = await call(REPORT);
    assert.equal(a.who, "preimported");
    assert.equal(b.who, "preimported");
    assert.notEqual(a.random, b.random);
    assert.notEqual(a.token, b.token, "each pooled jail imported it itself");
    const fresh = await call(REPORT, { SCRATCHRUN_PROBE_MODE: "x" });
    assert.equal(fresh.who, "fresh");
    assert.equal(fresh.import_cwd, "/home/user");
  });
});
