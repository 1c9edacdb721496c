/**
 * The page half of the issue-52 spike (docs/decisions/0020-sleep-and-fork.md, "Measure first"):
 * which pages of a clone's guest RAM are its own (a copy-on-write copy of the template's sealed
 * memfd), read through /proc/PID/pagemap and /proc/PID/mem of its QEMU. Spike code: the
 * product's version is slice 2's dirty-pages.ts.
 */
import { closeSync, openSync, readFileSync, readlinkSync, readSync } from "node:fs";
import { QEMU_BINARY } from "../../src/backends/microvm/accel.js";

export const PAGE = 4096;
const ZERO = Buffer.alloc(PAGE);
/** The memfd every template's RAM is (src/backends/microvm/sealed-ram.c). */
const RAM_NAME = "/memfd:scratchrun-template-ram";

/** The QEMU process among a VM cgroup's pids (the jail's bwrap is there too). */
export function qemuPid(pids: readonly number[]): number {
  const found = pids.filter((p) => {
    try {
      return readlinkSync(`/proc/${p}/exe`) === QEMU_BINARY;
    } catch {
      return false;
    }
  });
  if (found.length !== 1) throw new Error(`expected one QEMU in the cgroup, found ${found.length}`);
  return found[0]!;
}

/** The one mapping of the template memfd, `bytes` long, in QEMU's address space. */
export function ramMapping(pid: number, bytes: number): { start: number; bytes: number } {
  const hits = readFileSync(`/proc/${pid}/maps`, "utf8")
    .split("\n")
    .filter((l) => l.includes(RAM_NAME))
    .map((l) => {
      const [range] = l.split(" ");
      const [a, b] = (range ?? "").split("-").map((h) => parseInt(h, 16));
      return { start: a!, bytes: b! - a! };
    })
    .filter((m) => m.bytes === bytes);
  if (hits.length !== 1) throw new Error(`expected one RAM mapping, found ${hits.length}`);
  return hits[0]!;
}

export interface PageScan {
  /** Page numbers (from the mapping's start) that are the clone's own: anonymous, present or swapped. */
  own: Uint32Array;
  /** Pages present and the template's (file pages of the memfd). */
  shared: number;
  /** Pages never touched by this QEMU. */
  absent: number;
}

/**
 * Reads pagemap's flag byte of each page (byte 7 of its 8: bit 7 present, 6 swapped, 5 file page
 * or shared anonymous). In a private file mapping a page is anonymous only once written: a copy.
 */
export function scanPages(pid: number, map: { start: number; bytes: number }): PageScan {
  const pages = map.bytes / PAGE;
  const buf = Buffer.alloc(pages * 8);
  const fd = openSync(`/proc/${pid}/pagemap`, "r");
  try {
    let got = 0;
    while (got < buf.length) {
      const n = readSync(fd, buf, got, buf.length - got, (map.start / PAGE) * 8 + got);
      if (n === 0) throw new Error("short pagemap read");
      got += n;
    }
  } finally {
    closeSync(fd);
  }
  const own: number[] = [];
  let shared = 0;
  let absent = 0;
  for (let i = 0; i < pages; i++) {
    const flags = buf[i * 8 + 7]!;
    const inMemory = (flags & 0x80) !== 0 || (flags & 0x40) !== 0;
    if (!inMemory) absent++;
    else if (flags & 0x20) shared++;
    else own.push(i);
  }
  return { own: Uint32Array.from(own), shared, absent };
}

/** Consecutive page numbers as [first, count] runs. */
export function runsOf(pages: Uint32Array): [number, number][] {
  const runs: [number, number][] = [];
  for (const p of pages) {
    const last = runs[runs.length - 1];
    if (last && last[0] + last[1] === p) last[1]++;
    else runs.push([p, 1]);
  }
  return runs;
}

/** The bytes of `pages` (in order) read from QEMU's memory, and which of them are all zero. */
export function readPages(
  pid: number,
  map: { start: number },
  pages: Uint32Array,
): { data: Buffer; zero: Uint8Array } {
  const data = Buffer.allocUnsafe(pages.length * PAGE);
  const fd = openSync(`/proc/${pid}/mem`, "r");
  try {
    let at = 0;
    for (const [first, count] of runsOf(pages)) {
      const len = count * PAGE;
      let got = 0;
      while (got < len) {
        const n = readSync(fd, data, at + got, len - got, map.start + first * PAGE + got);
        if (n === 0) throw new Error("short /proc/PID/mem read");
        got += n;
      }
      at += len;
    }
  } finally {
    closeSync(fd);
  }
  const zero = new Uint8Array(pages.length);
  for (let i = 0; i < pages.length; i++)
    zero[i] = data.subarray(i * PAGE, (i + 1) * PAGE).equals(ZERO) ? 1 : 0;
  return { data, zero };
}

/**
 * Checks the scan against the bytes (untimed; the spike's correctness check): every present page
 * of QEMU's mapping compared with the same page of the template memfd. `missed`: pages that
 * differ but the scan called the template's (data lost if it happened); `unchanged`: own pages
 * whose bytes equal the template's (disk spent, correctness kept).
 */
export function checkScan(
  pid: number,
  map: { start: number; bytes: number },
  templateFd: number,
  scan: PageScan,
): { differing: number; missed: number; unchanged: number } {
  const own = new Set(scan.own);
  const mem = openSync(`/proc/${pid}/mem`, "r");
  const a = Buffer.alloc(PAGE);
  const b = Buffer.alloc(PAGE);
  let differing = 0;
  let missed = 0;
  let unchanged = 0;
  // Only pages the pagemap showed in memory: an absent page faults in as the template's anyway
  // (and reading it here would fault it in).
  const pagemap = openSync(`/proc/${pid}/pagemap`, "r");
  const flags = Buffer.alloc(8);
  try {
    for (let i = 0; i < map.bytes / PAGE; i++) {
      readSync(pagemap, flags, 0, 8, (map.start / PAGE + i) * 8);
      if ((flags[7]! & 0xc0) === 0) continue;
      readSync(mem, a, 0, PAGE, map.start + i * PAGE);
      readSync(templateFd, b, 0, PAGE, i * PAGE);
      const same = a.equals(b);
      if (!same) differing++;
      if (!same && !own.has(i)) missed++;
      if (same && own.has(i)) unchanged++;
    }
  } finally {
    closeSync(mem);
    closeSync(pagemap);
  }
  return { differing, missed, unchanged };
}

/**
 * QEMU 7.2's xen-save-devices-state writes the stream's header and device sections but no
 * configuration section, which a destination that expects one (migration's send-configuration,
 * on by default) refuses ("Configuration section missing"). The template's own stream has it
 * (machine type, target page bits, the x-ignore-shared capability): its header and configuration
 * section are put in front of the device sections. Its layout, QEMU migration/savevm.c: be32
 * magic, be32 version, byte 7, be32 length + machine name, then subsections (byte 5, byte length +
 * name, be32 version, fields).
 */
export function withConfiguration(templateState: Buffer, devices: Buffer): Buffer {
  const t = templateState;
  if (t.readUInt32BE(0) !== 0x5145564d || devices.readUInt32BE(0) !== 0x5145564d)
    throw new Error("not a QEMU migration stream");
  let at = 8;
  if (t[at++] !== 7) throw new Error("template stream has no configuration section");
  at += 4 + t.readUInt32BE(at);
  while (t[at] === 5) {
    const len = t[at + 1]!;
    const name = t.subarray(at + 2, at + 2 + len).toString();
    at += 2 + len + 4;
    if (name === "configuration/target-page-bits") at += 4;
    else if (name === "configuration/uuid") at += 16;
    else if (name === "configuration/capabilities") {
      const count = t.readUInt32BE(at);
      at += 4;
      for (let i = 0; i < count; i++) at += 1 + t[at]!;
    } else throw new Error(`unknown configuration subsection ${name}`);
  }
  return Buffer.concat([t.subarray(0, at), devices.subarray(8)]);
}
