// The guest kernel's uname rewrite (src/images/vm/uname.ts, THREAT-MODEL H21) and the TSC
// frequency the guest is told (src/backends/microvm/accel.ts): pure, over synthetic images.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { GUEST_UNAME_VERSION, guestRelease, patchUname } from "../../src/images/vm/uname.js";
import { hostTscKhz } from "../../src/backends/microvm/accel.js";

const RELEASE = "6.1.0-57-cloud-amd64";
const VERSION = "#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3 (2026-11-26)";

/** A struct new_utsname as the kernel lays it out: six 65-byte NUL-padded fields. */
function uts(fields: string[]): Buffer {
  return Buffer.concat(
    fields.map((f) => {
      const b = Buffer.alloc(65);
      b.write(f, "latin1");
      return b;
    }),
  );
}

const initUts = (release = RELEASE, version = VERSION) =>
  uts(["Linux", "(none)", release, version, "x86_64", "(none)"]);

/** A fake image: the structure between unrelated bytes that also name the release. */
function image(...structs: Buffer[]): Buffer {
  const noise = Buffer.from(`Linux version ${RELEASE} (debian-kernel@lists.debian.org)\0`);
  return Buffer.concat([Buffer.alloc(100, 0xcc), noise, ...structs.flatMap((s) => [s, noise])]);
}

describe("guest uname", () => {
  test("the release keeps the upstream series and names the guest", () => {
    assert.equal(guestRelease(RELEASE), "6.1.0-scratchrun-guest");
    assert.equal(guestRelease("6.12.9+bpo-cloud-amd64"), "6.12.0-scratchrun-guest");
    assert.throws(() => guestRelease("cloud"), /does not start with X\.Y/);
  });

  test("every init_uts_ns is rewritten; nothing else moves", () => {
    // 6.1 has two: version.c's (build number '#') and version-timestamp.c's.
    const img = image(initUts(RELEASE, "# SMP PREEMPT_DYNAMIC Debian"), initUts());
    const out = patchUname(img, RELEASE, guestRelease(RELEASE));
    assert.equal(out.length, img.length);
    assert.equal(out.indexOf(initUts()), -1);
    const want = uts(["Linux", "(none)", "6.1.0-scratchrun-guest", GUEST_UNAME_VERSION]);
    const first = out.indexOf(want);
    assert.ok(first > 0);
    assert.ok(out.indexOf(want, first + 1) > first, "the second copy too");
    // The machine and domain fields, and bytes outside the structures, are untouched.
    const diff = [...out.keys()].filter((i) => out[i] !== img[i]);
    for (const i of diff) {
      const start = img.indexOf(initUts(RELEASE, "# SMP PREEMPT_DYNAMIC Debian"));
      const second = img.indexOf(initUts());
      const inside = (s: number) => i >= s + 130 && i < s + 260;
      assert.ok(inside(start) || inside(second), `byte ${i} changed outside release/version`);
    }
    assert.ok(out.includes(`Linux version ${RELEASE}`), "the banner string is left alone");
    // The original image is not modified in place.
    assert.ok(img.includes(initUts()));
  });

  test("an image without the structure (or with another release) is refused, not booted as is", () => {
    assert.throws(() => patchUname(image(), RELEASE, "x"), /no init_uts_ns naming release/);
    assert.throws(
      () => patchUname(image(initUts("6.1.0-58-cloud-amd64")), RELEASE, "x"),
      /no init_uts_ns/,
    );
    // A look-alike whose version field is not a build string ("#...") is not the structure.
    assert.throws(() => patchUname(image(initUts(RELEASE, "SMP")), RELEASE, "x"), /no init_uts_ns/);
  });

  test("a field that does not fit is refused", () => {
    assert.throws(() => patchUname(image(initUts()), RELEASE, "x".repeat(65)), /too long/);
  });
});

describe("the TSC frequency the guest is told", () => {
  test("the host's calibration is rounded to whole MHz", () => {
    assert.equal(hostTscKhz("cpu MHz\t\t: 2596.136\n"), 2596000);
    assert.equal(hostTscKhz("cpu MHz\t\t: 2095.578\n"), 2096000);
    assert.equal(hostTscKhz("cpu MHz\t\t: 3000.000\n"), 3000000);
  });

  test("unknown or implausible: none", () => {
    assert.equal(hostTscKhz("processor : 0\n"), null);
    assert.equal(hostTscKhz("cpu MHz\t\t: 50.0\n"), null);
  });
});
