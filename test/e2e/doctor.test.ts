import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { TemplateStore } from "../../src/backends/microvm/template-store.js";
import { findRootfs } from "../../src/images/locate.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { DOCKER, HOST_FIREWALL } from "../net/other-link.js";

const CLI = join(REPO_ROOT, "dist/src/bin/scratchrun.js");
const doctor = (env: Record<string, string> = {}) =>
  spawnSync(process.execPath, [CLI, "doctor"], {
    env: { ...process.env, ...env },
    encoding: "utf8",
  });

describe("scratchrun doctor", () => {
  test("passes on a host set up by the README's command, naming every check", () => {
    const r = doctor();
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

  test("python3.12's packages: what the image really holds, and the fix when it is the standard library only", () => {
    const r = doctor();
    const image = findRootfs();
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

  test("python3.13's packages: the lock's stack when the host's pip reached an index, else the standard library only", () => {
    const r = doctor();
    const image = findRootfs();
    assert.ok(image.ok);
    if (image.manifest.python313PackagesFrom === "none")
      assert.match(
        r.stdout,
        /^warn\s+python3\.13 packages: python3\.13 has the standard library only/m,
      );
    else assert.match(r.stdout, /^ok\s+python3\.13 packages: from the lock: numpy \d/m);
  });

  test("a missing image fails with exit 1 and the exact command that fixes it", () => {
    const r = doctor({ SCRATCHRUN_IMAGES: "/nonexistent/scratchrun-images" });
    assert.equal(r.status, 1);
    assert.match(r.stdout, /^FAIL\s+runtime image: no runtime image/m);
    assert.match(r.stdout, /fix: npm run setup/);
    assert.match(r.stdout, /1 required check\(s\) failed/);
  });

  test("kept microVM templates: off, none yet, or how many, their size, and the stale ones", async () => {
    assert.match(
      doctor({ SCRATCHRUN_TEMPLATE_CACHE: "off" }).stdout,
      /^ok\s+kept templates: off \(SCRATCHRUN_TEMPLATE_CACHE=off\)/m,
    );
    const dir = mkdtempSync(join(tmpdir(), "sr-doctor-templates-"));
    try {
      assert.match(
        doctor({ SCRATCHRUN_TEMPLATE_CACHE: dir }).stdout,
        /^ok\s+kept templates: none yet in /m,
      );
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
      const out = doctor({ SCRATCHRUN_TEMPLATE_CACHE: dir }).stdout;
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

  test("SCRATCHRUN_NETWORK=none is reported as a choice, not a problem", () => {
    const r = doctor({ SCRATCHRUN_NETWORK: "none" });
    assert.match(r.stdout, /^ok\s+network egress: disabled by SCRATCHRUN_NETWORK=none/m);
    assert.match(r.stdout, /^ok\s+host firewall \(forwarding\): network disabled by/m);
  });

  test("a forward chain that drops by policy is named with its fix; Docker's is opened by the server (in a namespace of the test's own)", () => {
    const ns = `srt${process.pid}-doc`;
    const inNs = (args: string[], input?: string) =>
      spawnSync("/usr/sbin/ip", ["netns", "exec", ns, ...args], { input, encoding: "utf8" });
    spawnSync("/usr/sbin/ip", ["netns", "add", ns]);
    try {
      const nft = (script: string) =>
        assert.equal(inNs(["/usr/sbin/nft", "-f", "-"], script).status, 0);
      const inside = () =>
        inNs([process.execPath, CLI, "doctor"], undefined)
          .stdout.split("\n")
          .filter((l) => l.includes("host firewall"));
      assert.match(
        inside()[0] ?? "",
        /^ok\s+host firewall \(forwarding\): no forward chain drops by policy/,
      );
      nft(DOCKER);
      assert.match(
        inside()[0] ?? "",
        /^ok\s+.*Docker's FORWARD policy drops; the server lets its sandbox links through DOCKER-USER/,
      );
      nft(HOST_FIREWALL);
      const r = inNs([process.execPath, CLI, "doctor"]).stdout;
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
