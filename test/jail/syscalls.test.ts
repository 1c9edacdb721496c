import { cannotRunHere } from "../helpers/ci.js";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { test } from "node:test";
import { X86_64_SYSCALLS, X32_SYSCALL_BIT } from "../../src/jail/syscalls.js";

const HEADER = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h";
const NEWER_THAN_HEADER = new Set(["open_tree_attr", "mseal"]);

test("every syscall number matches the installed kernel header", (t) => {
  if (!existsSync(HEADER)) {
    cannotRunHere(t, `${HEADER} missing (apt-get install linux-libc-dev)`);
    return;
  }
  const header = new Map<string, number>();
  for (const m of readFileSync(HEADER, "utf8").matchAll(/^#define __NR_(\w+) (\d+)$/gm)) {
    header.set(m[1]!, Number(m[2]));
  }
  assert.ok(header.size > 300, "header parsed");
  let checked = 0;
  for (const [name, nr] of Object.entries(X86_64_SYSCALLS)) {
    if (NEWER_THAN_HEADER.has(name) && !header.has(name)) continue;
    assert.equal(nr, header.get(name), `__NR_${name}`);
    checked++;
  }
  assert.ok(checked >= Object.keys(X86_64_SYSCALLS).length - NEWER_THAN_HEADER.size);
});

test("numbers are unique and below the x32 bit", () => {
  const values = Object.values(X86_64_SYSCALLS);
  assert.equal(new Set(values).size, values.length);
  for (const v of values) assert.ok(Number.isInteger(v) && v >= 0 && v < X32_SYSCALL_BIT);
});
