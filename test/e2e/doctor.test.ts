import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { TemplateStore } from "../../src/backends/microvm/template-store.js";
import { findRootfs } from "../../src/images/locate.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { DOCKER, HOST_FIREWALL } from "../net/other-link.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

const CLI = join(REPO_ROOT, "dist/src/bin/scratchrun.js");
interface Ran {
  status: number | null;
  stdout: string;
  stderr: string;
}
/** Runs `argv` to its end without blocking the other tests. */
const ran = (argv: string[], env: NodeJS.ProcessEnv) =>
  new Promise<Ran>((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { env });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.on("error", reject);
    child.on("close", (status) => resolve({ status, stdout, stderr }));
    child.stdin.end();
  });
const doctor = (env: Record<string, string> = {}) =>
  ran([process.execPath, CLI, "doctor"], { ...process.env, ...env });
/** The host as setup left it: one run read by the tests that ask about it. */
let plain: Promise<Ran> | undefined;
const doctorHere = () => (plain ??= doctor());

// Each doctor run waits up to 4 s on its KVM probe (a host where /dev/kvm opens but no guest
// boots), the same wait whatever else it checks: the tests, each on its own input (an image path,
// a template directory, a network namespace of its own), run at once.
describe("scratchrun doctor", { concurrency: true }, () => {
  test("passes on a host set up by the README's command, naming every check", async () => {
    const r = await doctorHere();
    assert.equal(r.status, 0, r.stdout + r.stderr);
    for (const name of [
      "root",
      "bubblewrap",
      "cgroups",
      "agent",
      "runtime image",
      "python3.12 packages",
      "python3.13 packages",
      "kvm",
      "qemu",
      "network egress",
      "host firewall \\(forwarding\\)",
      "disk",
    ])
      assert.match(
        r.stdout,
        new RegExp(`^(ok|warn|FAIL)\\s+${name}:`, "m"),
        `check ${name} is listed`,
      );
    assert.match(
      r.stdout,
      /runtime image: .*python3\.12 3\.12\.\d+.*python3\.11 3\.11\.\d+.*node20 v20\./,
    );
  });

  test("python3.12's packages: what the image really holds, and the fix when it is the standard library only", async () => {
    const r = await doctorHere();
    const image = findRootfs(settingsFrom(process.env).images);
    assert.ok(image.ok);
    if (image.manifest.python312PackagesFrom === "none") {
      assert.match(
        r.stdout,
        /^warn\s+python3\.12 packages: python3\.12 has the standard library only/m,
      );
      assert.match(r.stdout, /fix: set SCRATCHRUN_WHEELHOUSE=.*SCRATCHRUN_PIP_INDEX_URL=/);
    } else {
      assert.match(r.stdout, /^ok\s+python3\.12 packages: from \w+: numpy \d/m);
    }
  });

  test("python3.13's packages: the lock's stack when the host's pip reached an index, else the standard library only", async () => {
    const r = await doctorHere();
    const image = findRootfs(settingsFrom(process.env).images);
    assert.ok(image.ok);
    if (image.manifest.python313PackagesFrom === "none")
      assert.match(
        r.stdout,
        /^warn\s+python3\.13 packages: python3\.13 has the standard library only/m,
      );
    else assert.match(r.stdout, /^ok\s+python3\.13 packages: from the lock: numpy \d/m);
  });

  test("a missing image fails with exit 1 and the exact command that fixes it", async () => {
    const r = await doctor({ SCRATCHRUN_IMAGES: "/nonexistent/scratchrun-images" });
    assert.equal(r.status, 1);
    assert.match(r.stdout, /^FAIL\s+runtime image: no runtime image/m);
    assert.match(r.stdout, /fix: npm run setup/);
    assert.match(r.stdout, /1 required check\(s\) failed/);
  });

  test("kept microVM templates: off, none yet, or how many, their size, and the stale ones", async () => {
    const dir = mkdtempSync(join(tmpdir(), "sr-doctor-templates-"));
    try {
      const [off, none] = await Promise.all([
        doctor({ SCRATCHRUN_TEMPLATE_CACHE: "off" }),
        doctor({ SCRATCHRUN_TEMPLATE_CACHE: dir }),
      ]);
      assert.match(off.stdout, /^ok\s+kept templates: off \(SCRATCHRUN_TEMPLATE_CACHE=off\)/m);
      assert.match(none.stdout, /^ok\s+kept templates: none yet in /m);
      // Two kept templates as a save writes them: one made from files that exist, one whose
      // kernel is gone (a pruned build).
      const save = (slot: string, madeFrom: string[]) =>
        new TemplateStore(dir).save(
          slot,
          "k".repeat(64),
          "/dev/zero",
          1 << 20,
          Buffer.from("s"),
          madeFrom,
        );
      await save("bash/256/plain", [CLI]);
      await save("node20/256/plain", [join(dir, "gone-vmlinux")]);
      const out = (await doctor({ SCRATCHRUN_TEMPLATE_CACHE: dir })).stdout;
      assert.match(
        out,
        /^ok\s+kept templates: 2 in .*, 1 stale \(removed at the next microVM start\): /m,
      );
      const store = new TemplateStore(dir);
      const stale = (await store.list()).filter((t) => !t.current).map((t) => t.file);
      assert.equal(stale.length, 1);
      assert.deepEqual(await store.prune(), stale);
      assert.deepEqual(
        (await store.list()).map((t) => t.slot),
        ["bash/256/plain"],
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("SCRATCHRUN_NETWORK=none is reported as a choice, not a problem", async () => {
    const r = await doctor({ SCRATCHRUN_NETWORK: "none" });
    assert.match(r.stdout, /^ok\s+network egress: disabled by SCRATCHRUN_NETWORK=none/m);
    assert.match(r.stdout, /^ok\s+host firewall \(forwarding\): network disabled by/m);
  });

  test("a forward chain that drops by policy is named with its fix; Docker's is opened by the server (in a namespace of the test's own)", async () => {
    const ns = `srt${process.pid}-doc`;
    const inNs = (args: string[], input?: string) =>
      spawnSync("/usr/sbin/ip", ["netns", "exec", ns, ...args], { input, encoding: "utf8" });
    spawnSync("/usr/sbin/ip", ["netns", "add", ns]);
    try {
      const nft = (script: string) =>
        assert.equal(inNs(["/usr/sbin/nft", "-f", "-"], script).status, 0);
      const inDoctor = () =>
        ran(["/usr/sbin/ip", "netns", "exec", ns, process.execPath, CLI, "doctor"], process.env);
      const inside = async () =>
        (await inDoctor()).stdout.split("\n").filter((l) => l.includes("host firewall"));
      assert.match(
        (await inside())[0] ?? "",
        /^ok\s+host firewall \(forwarding\): no forward chain drops by policy/,
      );
      nft(DOCKER);
      assert.match(
        (await inside())[0] ?? "",
        /^ok\s+.*Docker's FORWARD policy drops; the server lets its sandbox links through DOCKER-USER/,
      );
      nft(HOST_FIREWALL);
      const r = (await inDoctor()).stdout;
      assert.match(
        r,
        /^warn\s+host firewall \(forwarding\): inet hostfw forward drops forwarded traffic by policy/m,
      );
      assert.match(
        r,
        /fix: let the sandbox links through, e\.g\. nft insert rule inet hostfw forward iifname "sr-h\*" accept/,
      );
    } finally {
      spawnSync("/usr/sbin/ip", ["netns", "del", ns]);
    }
  });
});
