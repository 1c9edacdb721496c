/**
 * The guest kernel's uname (THREAT-MODEL H21). The microVM boots the host's newest Debian cloud
 * kernel, on a Debian host often the very kernel the host runs: its release and version strings
 * would tell the code the host's kernel and patch level. The build rewrites them in the kernel's
 * `init_uts_ns` (what uname(2), /proc/version and /proc/sys/kernel/osrelease read), in the
 * extracted ELF vmlinux, to a release that keeps the upstream series (programs parse it to pick
 * kernel features) and says it is the sandbox's guest kernel. Pure over the image bytes.
 */

/** `__NEW_UTS_LEN + 1`: each field of `struct new_utsname`. */
const FIELD = 65;

/** What uname's version field says in the guest (the build's "#1 SMP ... Debian 6.1.N-M (date)"). */
export const GUEST_UNAME_VERSION = "#1 SMP ScratchRun microVM guest kernel";

/** "6.1.0-57-cloud-amd64" → "6.1.0-scratchrun-guest": the upstream series, no distribution build. */
export function guestRelease(release: string): string {
  const m = /^(\d+)\.(\d+)/.exec(release);
  if (!m) throw new Error(`kernel release ${JSON.stringify(release)} does not start with X.Y`);
  return `${m[1]}.${m[2]}.0-scratchrun-guest`;
}

function field(text: string): Buffer {
  const b = Buffer.alloc(FIELD);
  if (Buffer.byteLength(text) >= FIELD) throw new Error(`uname field too long: ${text}`);
  b.write(text, "latin1");
  return b;
}

/**
 * Returns a copy of `vmlinux` whose every `init_uts_ns` ("Linux", "(none)", `release`, a version
 * starting with "#", each in a 65-byte field) names `newRelease` and `newVersion`. Throws when
 * none is found: a kernel laid out otherwise must not boot with the host's strings unnoticed.
 */
export function patchUname(
  vmlinux: Buffer,
  release: string,
  newRelease: string,
  newVersion = GUEST_UNAME_VERSION,
): Buffer {
  const head = Buffer.concat([field("Linux"), field("(none)"), field(release)]);
  const out = Buffer.from(vmlinux);
  const replacement = Buffer.concat([field(newRelease), field(newVersion)]);
  let patched = 0;
  for (let at = out.indexOf(head); at >= 0; at = out.indexOf(head, at + 1)) {
    if (out[at + 3 * FIELD] !== "#".charCodeAt(0) || out[at + 4 * FIELD - 1] !== 0) continue;
    replacement.copy(out, at + 2 * FIELD);
    patched++;
  }
  if (patched === 0)
    throw new Error(
      `no init_uts_ns naming release ${JSON.stringify(release)} in the kernel image; ` +
        "pass a Debian cloud kernel (linux-image-cloud-amd64)",
    );
  return out;
}
