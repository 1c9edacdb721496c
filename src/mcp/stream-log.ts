import { redactSecrets } from "../engine/shape-output.js";

/**
 * Turns output chunks into whole lines for MCP logging messages, redacting env values per line
 * (a secret split across two chunks is joined before it is checked). A partial last line is
 * flushed at the end; a line longer than `maxLine` is sent in pieces.
 */
export class LineStreamer {
  private buffers = { stdout: "", stderr: "" };
  private readonly decoders = {
    stdout: new TextDecoder("utf-8", { fatal: false }),
    stderr: new TextDecoder("utf-8", { fatal: false }),
  };

  constructor(
    private readonly send: (stream: "stdout" | "stderr", line: string) => void,
    private readonly env: Readonly<Record<string, string>> | null,
    private readonly maxLine = 8192,
  ) {}

  push(stream: "stdout" | "stderr", chunk: Uint8Array): void {
    let buf = this.buffers[stream] + this.decoders[stream].decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0 || buf.length > this.maxLine) {
      const cut = nl >= 0 && nl < this.maxLine ? nl + 1 : this.maxLine;
      this.emit(stream, buf.slice(0, cut));
      buf = buf.slice(cut);
    }
    this.buffers[stream] = buf;
  }

  flush(): void {
    for (const stream of ["stdout", "stderr"] as const) {
      const rest = this.buffers[stream] + this.decoders[stream].decode();
      this.buffers[stream] = "";
      if (rest) this.emit(stream, rest);
    }
  }

  private emit(stream: "stdout" | "stderr", text: string): void {
    this.send(stream, this.env ? redactSecrets(text, this.env) : text);
  }
}
