import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { guestConstants, renderGuestHeader } from "../../src/protocol/guest-header.js";
import { EXIT_REASON_CODES, FILE_STATUS_CODES } from "../../src/protocol/codec.js";

const REPO = join(import.meta.dirname, "..", "..", "..");

/** `#define NAME VALUEu` and `NAME = N,` pairs of a C header, as numbers. */
function parseHeader(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^#define ([A-Z_]+) (\d+)u$/gm)) out.set(m[1]!, Number(m[2]));
  for (const m of text.matchAll(/^ {2}([A-Z_]+) = (\d+),$/gm)) out.set(m[1]!, Number(m[2]));
  return out;
}

describe("the guest's shared constants come from the host's TypeScript", () => {
  it("the rendered header holds each constant, exit reason and file status at its wire value", () => {
    const parsed = parseHeader(renderGuestHeader());
    for (const [name, value] of Object.entries(guestConstants()))
      assert.equal(parsed.get(name), value, name);
    EXIT_REASON_CODES.forEach((c, i) => assert.equal(parsed.get(`R_${c.toUpperCase()}`), i, c));
    FILE_STATUS_CODES.forEach((c, i) => assert.equal(parsed.get(`FS_${c.toUpperCase()}`), i, c));
  });

  it("the agent was built with the current rendering, and guest/ defines none of them itself", () => {
    const built = readFileSync(join(REPO, "build/guest/include/scratchrun-shared.h"), "utf8");
    assert.equal(built, renderGuestHeader(), "npm run build writes the header");
    const names = [...parseHeader(built).keys()];
    const guest = join(REPO, "guest");
    for (const file of ["agent-wire.h", "agent-request.h", "agent-run.h", "agent-files.h"]) {
      const text = readFileSync(join(guest, file), "utf8");
      for (const name of names)
        assert.doesNotMatch(
          text,
          new RegExp(`(#define ${name}\\b|\\b${name} = )`),
          `${file} redefines ${name}`,
        );
    }
  });
});
