import { TextDecoder } from "node:util";
import { MIN_REDACT_LENGTH, redactSecrets } from "../engine/shape-output.js";

type Stream = "stdout" | "stderr";

interface StreamState {
  /** Output not sent yet, as printed (not redacted). */
  pending: string;
  decoder: TextDecoder;
  /** Length `pending` must reach before a cut that is not at a line end is tried again. */
  nextForcedTry: number;
  /** Forced cuts that found no free position. */
  failedCuts: number;
}

/** A high surrogate at i - 1 would be split from its low half by a cut at i. */
const splitsPair = (text: string, i: number) => {
  const c = text.charCodeAt(i - 1);
  return i > 0 && i < text.length && c >= 0xd800 && c <= 0xdbff;
};

/** Forced cuts that found no free position before the streamer stops trying (until flush). */
const MAX_FAILED_CUTS = 16;
/** Positions one forced cut tries, each the start of the occurrence that spanned the last. */
const CUT_TRIES = 8;

/**
 * Turns output chunks into whole lines for MCP logging messages, redacted exactly as the result
 * is: what goes out, joined, equals `redactSecrets` of the whole stream, so no env value leaves
 * unredacted, whole or in pieces.
 *
 * Text goes out in commits: a prefix of the pending output that no occurrence of a secret spans,
 * now or once more output arrives. Redaction runs on the committed text as a whole, before it is
 * cut into lines (a line longer than `maxLine` in pieces). A commit ends
 *  - at a newline, when no secret contains one (no occurrence can span a line end), or
 *  - for a long line (or secrets with newlines), at least (longest secret - 1) characters before
 *    the end of what arrived (an occurrence completed by later output starts after the cut), at
 *    a position no occurrence spans; with none free nearby it waits for more output.
 * The rest waits for more output or for `flush()`, which sends everything. Holding text back is
 * always safe, so the work spent looking for cuts is bounded (MAX_FAILED_CUTS).
 */
export class LineStreamer {
  private readonly states: Record<Stream, StreamState>;
  private readonly secrets: Readonly<Record<string, string>>;
  private readonly values: readonly string[];
  /** Longest value that is redacted (0: none). */
  private readonly longest: number;
  /** Whether a line end is always a safe cut: no redacted value contains a newline. */
  private readonly lineEndsSafe: boolean;

  constructor(
    private readonly send: (stream: Stream, line: string) => void,
    env: Readonly<Record<string, string>> | null,
    private readonly maxLine = 8192,
  ) {
    this.secrets = env ?? {};
    this.values = Object.values(this.secrets).filter((v) => v.length >= MIN_REDACT_LENGTH);
    this.longest = Math.max(0, ...this.values.map((v) => v.length));
    this.lineEndsSafe = this.values.every((v) => !v.includes("\n"));
    const state = (): StreamState => ({
      pending: "",
      decoder: new TextDecoder("utf-8", { fatal: false }),
      nextForcedTry: this.forcedTryAt(),
      failedCuts: 0,
    });
    this.states = { stdout: state(), stderr: state() };
  }

  push(stream: Stream, chunk: Uint8Array): void {
    const s = this.states[stream];
    const text = s.decoder.decode(chunk, { stream: true });
    s.pending += text;
    if (this.lineEndsSafe && text.includes("\n"))
      this.commit(stream, s.pending.lastIndexOf("\n") + 1);
    if (s.pending.length >= s.nextForcedTry && s.failedCuts < MAX_FAILED_CUTS)
      this.forcedCut(stream);
  }

  flush(): void {
    for (const stream of ["stdout", "stderr"] as const) {
      const s = this.states[stream];
      s.pending += s.decoder.decode();
      this.commit(stream, s.pending.length);
    }
  }

  /** Pending length at which a cut away from a line end is tried: a full piece plus the hold. */
  private forcedTryAt(): number {
    return this.maxLine + Math.max(0, this.longest - 1);
  }

  /** Commits a long line's head (or, with multi-line secrets, what is safely behind the hold). */
  private forcedCut(stream: Stream): void {
    const s = this.states[stream];
    const p = s.pending;
    // Whole pieces of maxLine characters, behind the hold.
    const free = p.length - Math.max(0, this.longest - 1);
    let cut = Math.floor(free / this.maxLine) * this.maxLine;
    for (let tries = 0; tries < CUT_TRIES && cut > 0; tries++) {
      if (splitsPair(p, cut)) cut -= 1;
      const spanning = this.spanningStart(p, cut);
      if (spanning < 0) return this.commit(stream, cut);
      cut = spanning;
    }
    s.failedCuts += 1;
    s.nextForcedTry = p.length + Math.max(this.longest, this.maxLine);
  }

  /** Start of an occurrence of a secret that spans position `cut` of `text`, or -1. */
  private spanningStart(text: string, cut: number): number {
    let first = -1;
    for (const v of this.values) {
      const from = Math.max(0, cut - v.length + 1);
      const i = text.slice(from, cut + v.length - 1).indexOf(v);
      if (i >= 0 && from + i < cut && (first < 0 || from + i < first)) first = from + i;
    }
    return first;
  }

  /** Redacts pending[0, end) as a whole, sends it as lines, keeps the rest pending. */
  private commit(stream: Stream, end: number): void {
    const s = this.states[stream];
    if (end <= 0) return;
    const text = this.redact(s.pending.slice(0, end));
    s.pending = s.pending.slice(end);
    s.nextForcedTry = this.forcedTryAt();
    let start = 0;
    while (start < text.length) {
      const nl = text.indexOf("\n", start);
      let cut = nl >= 0 && nl - start < this.maxLine ? nl + 1 : start + this.maxLine;
      if (cut > text.length) cut = text.length;
      if (splitsPair(text, cut)) cut -= 1;
      // Not inside a "[redacted:NAME]" marker (cosmetic: the marker is no secret).
      if (cut - start === this.maxLine && cut < text.length) {
        const marker = text.lastIndexOf("[redacted:", cut - 1);
        if (marker > start && text.indexOf("]", marker) >= cut) cut = marker;
      }
      this.send(stream, text.slice(start, cut));
      start = cut;
    }
  }

  private redact(text: string): string {
    return this.longest > 0 ? redactSecrets(text, this.secrets) : text;
  }
}
