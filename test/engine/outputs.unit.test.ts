// The engine's side of outputs (src/engine/outputs.ts): every byte of an output comes from the
// sandbox, so the parser is fed what hostile code could send, and must leave out (and name) what
// is malformed, never show it; the bounds are the guest's and the agent's too.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import fc from "fast-check";
import { buildOutputs, parseOutput, pythonError } from "../../src/engine/outputs.js";
import { redactSecrets } from "../../src/engine/shape-output.js";
import type { ShownEvent } from "../../src/protocol/types.js";
import { LIMITS } from "../../src/schema/limits.js";

const REPO = join(import.meta.dirname, "..", "..", "..");
const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 1, 2, 3]);
const record = (header: unknown, payload: Buffer = Buffer.alloc(0)) =>
  Buffer.concat([Buffer.from(`${JSON.stringify(header)}\n`), payload]);
const display = (content: Buffer, end: "whole" | "over" | "cut" = "whole"): ShownEvent => ({
  kind: "display",
  content,
  end,
});
const stdout = (bytes: number): ShownEvent => ({ kind: "stream", stream: "stdout", bytes });
const keep = (t: string) => t;

describe("parseOutput: what the sandbox sends", () => {
  it("reads a display's text forms and its image", () => {
    const p = parseOutput(
      record(
        {
          type: "display",
          data: { "text/plain": "<Figure>", "text/x-unknown": "no" },
          binary: "image/png",
          bytes: PNG.length,
        },
        PNG,
      ),
    );
    assert.ok(!("error" in p) && p.kind === "shown");
    assert.deepEqual(p.texts, [{ mime: "text/plain", text: "<Figure>" }]);
    assert.deepEqual(p.image?.content, PNG);
  });

  const bad: [string, Buffer, RegExp][] = [
    ["no newline", Buffer.from('{"type":"display"}'), /no header line/],
    ["not JSON", Buffer.from("{oops\n"), /not JSON/],
    ["an array", record([1]), /not an object/],
    ["an unknown type", record({ type: "exec", data: {} }), /unknown type/],
    ["no data", record({ type: "display" }), /no data/],
    ["no form at all", record({ type: "display", data: { "text/plain": 5 } }), /no form/],
    [
      "an image shorter than said",
      record({ type: "display", data: {}, binary: "image/png", bytes: 99 }, PNG),
      /not whole/,
    ],
    [
      "an image of a type not shown",
      record({ type: "display", data: {}, binary: "image/gif", bytes: 3 }, Buffer.from("GIF")),
      /not whole/,
    ],
    [
      "bytes that are not a PNG",
      record({ type: "display", data: {}, binary: "image/png", bytes: 4 }, Buffer.from("<svg")),
      /not image\/png/,
    ],
    [
      "bytes without an image named",
      record({ type: "result", data: { "text/plain": "x" } }, Buffer.from("junk")),
      /names none/,
    ],
    [
      "a left-out note with a negative count",
      record({ type: "left_out", count: -1, names: [] }),
      /malformed/,
    ],
  ];
  for (const [name, bytes, why] of bad)
    it(`refuses ${name}`, () => {
      const p = parseOutput(bytes);
      assert.ok("error" in p, JSON.stringify(p));
      assert.match(p.error, why);
    });

  it("never throws on random bytes, and what it accepts is bounded (property)", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 400 }), (bytes) => {
        const p = parseOutput(bytes);
        if ("error" in p || p.kind === "left_out") return;
        for (const t of p.texts) assert.ok(t.text.length <= 64 * 1024 + 70);
      }),
    );
    fc.assert(
      fc.property(fc.jsonValue(), fc.uint8Array({ maxLength: 40 }), (header, payload) => {
        parseOutput(record(header, Buffer.from(payload)));
      }),
    );
  });
});

describe("buildOutputs: the result's ordered outputs", () => {
  it("keeps the order of streams and outputs, images apart, forms best first", () => {
    const o = buildOutputs(
      [
        stdout(7),
        display(
          record(
            {
              type: "display",
              data: { "text/plain": "<Figure>" },
              binary: "image/png",
              bytes: PNG.length,
            },
            PNG,
          ),
        ),
        stdout(3),
        display(record({ type: "result", data: { "text/plain": "df", "text/markdown": "| a |" } })),
      ],
      keep,
    );
    assert.deepEqual(
      o.outputs.map((x) =>
        x.type === "stream" || x.type === "error"
          ? x.type
          : x.data.map((f) => f.mime_type).join(","),
      ),
      ["stream", "image/png,text/plain", "stream", "text/markdown,text/plain"],
    );
    assert.deepEqual(o.images, [{ output: 1, mimeType: "image/png", content: PNG }]);
    assert.equal(o.leftOut, null);
  });

  it("leaves out and names what is malformed, over a bound or cut off; adds the guest's own note", () => {
    const o = buildOutputs(
      [
        display(Buffer.from("garbage")),
        display(Buffer.alloc(0), "over"),
        display(record({ type: "display", data: { "text/plain": "x" } }), "cut"),
        display(record({ type: "left_out", count: 980, names: ["Figure 21", "Figure 22"] })),
      ],
      keep,
    );
    assert.deepEqual(o.outputs, []);
    assert.equal(o.leftOut?.count, 983);
    assert.deepEqual(o.leftOut?.names, [
      "output 1 (malformed: no header line)",
      "output 2 (over the bounds)",
      "output 3 (cut off)",
      "Figure 21",
      "Figure 22",
    ]);
  });

  it("shows at most LIMITS.outputs.maxCount outputs, whoever sent more", () => {
    const many = Array.from({ length: LIMITS.outputs.maxCount + 3 }, () =>
      display(record({ type: "display", data: { "text/plain": "x" } })),
    );
    const o = buildOutputs(many, keep);
    assert.equal(o.outputs.length, LIMITS.outputs.maxCount);
    assert.equal(o.leftOut?.count, 3);
  });

  it("redacts every text form and every name as the streams are", () => {
    const redact = (t: string) => redactSecrets(t, { TOKEN: "s3cret-value" });
    const o = buildOutputs(
      [
        display(record({ type: "result", data: { "text/plain": "{'t': 's3cret-value'}" } })),
        display(record({ type: "left_out", count: 1, names: ["s3cret-value"] })),
      ],
      redact,
    );
    assert.equal(JSON.stringify(o).includes("s3cret-value"), false);
    assert.match(JSON.stringify(o.outputs), /\[redacted:TOKEN\]/);
  });

  it("an image the sandbox dropped as too large keeps its size and says why", () => {
    const o = buildOutputs(
      [
        display(
          record({
            type: "display",
            data: { "text/plain": "big" },
            dropped: { "image/png": 3_000_000 },
          }),
        ),
      ],
      keep,
    );
    const first = o.outputs[0];
    assert.ok(first?.type === "display");
    assert.deepEqual(first.data[0], {
      mime_type: "image/png",
      size_bytes: 3_000_000,
      left_out: `over the ${LIMITS.outputs.maxBytes} bytes one output may have`,
    });
    assert.deepEqual(o.images, []);
  });
});

describe("pythonError: the exception at the end of stderr", () => {
  it("reads the type, the message and the traceback", () => {
    const e = pythonError(
      'Traceback (most recent call last):\n  File "/run/scratchrun/main.py", line 4, in <module>\n    f(0)\n  File "/run/scratchrun/main.py", line 2, in f\n    return 1 / x\n           ~~^~~\nZeroDivisionError: division by zero\n',
    );
    assert.equal(e?.ename, "ZeroDivisionError");
    assert.equal(e?.evalue, "division by zero");
    assert.match(
      e?.traceback ?? "",
      /^Traceback[\s\S]*line 2, in f[\s\S]*ZeroDivisionError: division by zero$/,
    );
  });

  it("takes the last traceback of a chain, a dotted type, a message over lines, one with none", () => {
    const chained =
      'Traceback (most recent call last):\n  File "x", line 1\nKeyError: \'a\'\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File "x", line 3\npandas.errors.ParserError: bad\nline two\n';
    assert.deepEqual(
      [pythonError(chained)?.ename, pythonError(chained)?.evalue],
      ["pandas.errors.ParserError", "bad\nline two"],
    );
    assert.deepEqual(
      [
        pythonError('Traceback (most recent call last):\n  File "x", line 1\nKeyboardInterrupt\n')
          ?.ename,
      ],
      ["KeyboardInterrupt"],
    );
  });

  it("reads a syntax error, which Python prints without a Traceback line", () => {
    const e = pythonError(
      "  File \"/run/scratchrun/main.py\", line 1\n    x = (\n        ^\nSyntaxError: '(' was never closed\n",
    );
    assert.equal(e?.ename, "SyntaxError");
    assert.match(e?.traceback ?? "", /^ {2}File "\/run\/scratchrun\/main\.py", line 1\n/);
  });

  it("finds nothing where stderr does not end in one", () => {
    for (const text of [
      "",
      "warning: x\n",
      'Traceback (most recent call last):\n  File "x"\n   \n',
      'Traceback (most recent call last):\n  File "x"\n!!! not an exception\n',
    ])
      assert.equal(pythonError(text), null, text);
  });

  it("keeps a huge traceback's head and end", () => {
    const frames = Array.from({ length: 2000 }, (_, i) => `  File "x", line ${i}, in f`).join("\n");
    const e = pythonError(
      `Traceback (most recent call last):\n${frames}\nRecursionError: maximum recursion depth exceeded\n`,
    );
    assert.ok((e?.traceback.length ?? 0) < 9 * 1024);
    assert.match(
      e?.traceback ?? "",
      /characters omitted[\s\S]*RecursionError: maximum recursion depth exceeded$/,
    );
  });
});

describe("the guest holds the same bounds and socket as the host", () => {
  const module = readFileSync(join(REPO, "guest/python/scratchrun_display.py"), "utf8");
  const constant = (name: string) => {
    const m = new RegExp(`^${name} = (.+)$`, "m").exec(module)?.[1];
    assert.ok(m, name);
    return Function(`"use strict"; return (${m.replace(/#.*$/, "")});`)() as number;
  };

  it("scratchrun_display.py's bounds are LIMITS.outputs", () => {
    assert.equal(constant("MAX_COUNT"), LIMITS.outputs.maxCount);
    assert.equal(constant("MAX_BYTES"), LIMITS.outputs.maxBytes);
    assert.equal(constant("MAX_TOTAL_BYTES"), LIMITS.outputs.maxTotalBytes);
  });

  it("the Python module, node's session kernel and the agent name the same socket", () => {
    const header = readFileSync(join(REPO, "guest/agent-display.h"), "utf8");
    const name = /#define DISPLAY_SOCKET "([^"]+)"/.exec(header)?.[1];
    assert.ok(name);
    assert.match(module, new RegExp(`SOCKET = "\\\\0" \\+ "${name}"\\.ljust\\(107, "_"\\)`));
    const node = readFileSync(join(REPO, "guest/session.js"), "utf8");
    assert.ok(node.includes(`const SOCKET = \`\\0\${"${name}".padEnd(107, "_")}\`;`));
  });
});
