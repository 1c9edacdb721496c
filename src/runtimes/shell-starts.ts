/**
 * Which of a shell runtime's other interpreters a call's code starts by name (RuntimeEntry
 * shellStarts): a command name standing as a word of its own (`node x.js`, `$(python3 -c ...)`,
 * `a && npm test`), not part of a longer name or path (`nodejs`, `python3.12` for `python3`,
 * `./node`). Only a hint for what a clone warms up: a name missed costs the call speed, a name
 * wrongly found costs background CPU, never correctness.
 */
import { RUNTIMES, type RuntimeName } from "./names.js";
import { runtimeEntry } from "./table.js";

/** Characters that may stand before or after a command word in shell code. */
const BEFORE = String.raw`(?:^|[\s;&|(\x60{!"'])`;
const AFTER = String.raw`(?=$|[\s;&|)\x60}<>"'])`;

function escape(name: string): string {
  return name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

const PATTERNS = new Map(
  RUNTIMES.map((runtime) => [
    runtime,
    (runtimeEntry(runtime).shellStarts ?? []).map(
      (s) => new RegExp(`${BEFORE}(?:${s.names.map(escape).join("|")})${AFTER}`, "m"),
    ),
  ]),
);

/** The runtime's shellStarts paths, in table order (their numbers in the guest's --warm-also). */
export function shellStartPaths(runtime: RuntimeName): string[] {
  return (runtimeEntry(runtime).shellStarts ?? []).map((s) => s.path);
}

/** The numbers (indexes into shellStartPaths) of the interpreters `code` starts by name. */
export function shellStartsNamed(runtime: RuntimeName, code: string): number[] {
  const out: number[] = [];
  (PATTERNS.get(runtime) ?? []).forEach((re, i) => {
    if (re.test(code)) out.push(i);
  });
  return out;
}
