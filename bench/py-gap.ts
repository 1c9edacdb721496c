// `node dist/bench/py-gap.js [rounds] [--out DIR]` (issue 45): where python3.12's run of the
// product page's example spends its time against python3.11's, in one run: the built stdio
// server on each backend (the microVM first, then the namespace backend as the host's own
// speed), its pools as the product keeps them (pre-imports on), the two runtimes' calls
// alternating one by one and `GAP_MS` apart (each waits for a refilled, warmed clone). Each
// round calls the example verbatim (what the user waits for) and the same statements with timers
// between them, plus two probes of the interpreter alone: a pure-Python loop (the interpreter's
// own speed: its build) and a numpy expression (compiled code, no interpreter). Writes
// bench/results/issue45/<date>-py-gap.{json,md}. Network "none". Run it under the test lock: it
// starts sandboxes.
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { PRODUCT_EXAMPLE } from "./workloads.js";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { out: { type: "string" } },
});
const rounds = Number(positionals[0] ?? 8);
/** A warmed microVM clone takes seconds to refill under TCG; a pre-imported jail ~0.6 s. */
const GAP_MS = Number(process.env.GAP_MS ?? 5000);
const NS_GAP_MS = 1000;
const BIN = fileURLToPath(new URL("../src/bin/scratchrun-mcp.js", import.meta.url));
const OUT = values.out ?? fileURLToPath(new URL("../../bench/results/issue45", import.meta.url));
const RUNTIMES = ["python3.11", "python3.12"] as const;
const POOLS = "python3.11=1,python3.12=1";

/** The example's statements with timers; then the interpreter probes. Its imports first. */
const TIMED = [
  ...PRODUCT_EXAMPLE.split("\n").slice(0, 2),
  "import time as _t, json as _j, io as _io",
  "_T = _t.perf_counter",
  "_a = _T()",
  "x = np.linspace(0, 10, 100)",
  "plt.plot(x, np.sin(x))",
  "_b = _T(); plt.gcf().canvas.draw(); _c = _T(); plt.gcf().canvas.draw(); _d = _T()",
  "from PIL import Image as _I",
  "_cv = plt.gcf().canvas",
  "_im = _I.frombuffer('RGBA', _cv.get_width_height(), _cv.buffer_rgba(), 'raw', 'RGBA', 0, 1)",
  "_e = _T(); _im.save(_io.BytesIO(), 'png'); _f = _T()",
  "plt.savefig('/tmp/plot.png'); _g = _T()",
  "def _loop(n):",
  "    s = 0",
  "    for i in range(n): s += i * i % 7",
  "    return s",
  "_h = _T(); _loop(100000); _i = _T()",
  "_v = np.random.default_rng(0).random(100000); _k = _T(); (np.sin(_v) * _v).sum(); _l = _T()",
  "_ms = lambda p, q: round((q - p) * 1e3, 1)",
  "print(_j.dumps({'plot': _ms(_a, _b), 'draw1': _ms(_b, _c), 'draw2': _ms(_c, _d), 'png': _ms(_e, _f), 'savefig': _ms(_f, _g), 'loop': _ms(_h, _i), 'numpy': _ms(_k, _l)}))",
].join("\n");

type Steps = Record<"plot" | "draw1" | "draw2" | "png" | "savefig" | "loop" | "numpy", number>;
interface Sample {
  verbatimMs: number;
  verbatimServerMs: number;
  steps: Steps;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const p50 = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

async function call(client: Client, runtime: string, code: string) {
  const t0 = performance.now();
  const r = await client.callTool(
    { name: "scratchrun_exec", arguments: { runtime, code, return_files: ["/tmp/plot.png"] } },
    CallToolResultSchema,
    { timeout: 120_000 },
  );
  const ms = performance.now() - t0;
  const s = r.structuredContent as {
    exit_reason: string;
    duration_ms: number;
    stdout: string;
    stderr: string;
    files: { status: string }[];
  };
  if (r.isError || s.exit_reason !== "ok" || s.files[0]?.status !== "ok")
    throw new Error(`${runtime}: ${JSON.stringify(r.content).slice(0, 500)}`);
  return { ms, serverMs: s.duration_ms, stdout: s.stdout };
}

async function measure(isolation: "microvm" | "namespace") {
  if (isolation === "microvm") {
    // As setup leaves a host: every pool's template kept (already kept: seconds).
    const kept = spawnSync(process.execPath, [join(BIN, "../scratchrun.js"), "templates"], {
      env: { ...process.env, SCRATCHRUN_ISOLATION: "microvm", SCRATCHRUN_POOL_SIZE: POOLS },
      stdio: "inherit",
    });
    if (kept.status !== 0) throw new Error("scratchrun templates failed");
  }
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [BIN],
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? "/root",
      SCRATCHRUN_ISOLATION: isolation,
      SCRATCHRUN_NETWORK: "none",
      SCRATCHRUN_LOCAL: "1",
      SCRATCHRUN_POOL_SIZE: POOLS,
    },
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const client = new Client({ name: "py-gap", version: "1" });
  await client.connect(transport);
  const samples: Record<string, Sample[]> = { "python3.11": [], "python3.12": [] };
  const gap = isolation === "microvm" ? GAP_MS : NS_GAP_MS;
  try {
    // One untimed call of each first: the runtime called once, its pools filled.
    for (const rt of RUNTIMES) await call(client, rt, PRODUCT_EXAMPLE);
    for (let i = 0; i < rounds; i++)
      for (const rt of i % 2 ? [...RUNTIMES].reverse() : RUNTIMES) {
        await sleep(gap);
        const v = await call(client, rt, PRODUCT_EXAMPLE);
        await sleep(gap);
        const t = await call(client, rt, TIMED);
        samples[rt]!.push({
          verbatimMs: v.ms,
          verbatimServerMs: v.serverMs,
          steps: JSON.parse(t.stdout) as Steps,
        });
        process.stderr.write(`py-gap ${isolation} ${rt} ${i + 1}/${rounds}: ${t.stdout.trim()}\n`);
      }
  } finally {
    await client.close();
  }
  const accel = /isolation (microvm-(?:kvm|tcg)|namespace)/.exec(stderr)?.[1] ?? isolation;
  const summary = Object.fromEntries(
    RUNTIMES.map((rt) => {
      const ss = samples[rt]!;
      const keys = Object.keys(ss[0]!.steps) as (keyof Steps)[];
      return [
        rt,
        {
          verbatimMs: Math.round(p50(ss.map((s) => s.verbatimMs))),
          verbatimServerMs: Math.round(p50(ss.map((s) => s.verbatimServerMs))),
          ...Object.fromEntries(keys.map((k) => [k, p50(ss.map((s) => s.steps[k]))])),
        } as Record<string, number>,
      ];
    }),
  );
  return { isolation: accel, samples, summary };
}

const started = new Date();
const runs = [];
for (const iso of ["microvm", "namespace"] as const) runs.push(await measure(iso));
const ROWS: [string, string][] = [
  ["verbatimMs", "the example verbatim, client wall"],
  ["verbatimServerMs", "the example verbatim, the code's time (duration_ms)"],
  ["plot", "np.linspace + plt.plot"],
  ["draw1", "first canvas draw in the call (render: matplotlib, text shaping)"],
  ["draw2", "second draw (render alone, warm)"],
  ["png", "PNG encode of the rendered buffer (Pillow, zlib)"],
  ["savefig", "plt.savefig (draw again + encode + write)"],
  ["loop", "pure-Python loop, 100k iterations (the interpreter alone)"],
  ["numpy", "numpy sin·x sum over 100k floats (no interpreter)"],
];
const ms = (x: number) => (x >= 100 ? String(Math.round(x)) : String(Math.round(x * 10) / 10));
const lines = [
  `# python3.12 against python3.11, the product page's example (issue 45)`,
  ``,
  `Run ${started.toISOString()} by \`node dist/bench/py-gap.js ${rounds}\`: ${rounds} rounds per runtime per backend, calls alternating, ${GAP_MS} ms apart (namespace ${NS_GAP_MS}), pools \`python3.11=1,python3.12=1\` (pre-imports on). p50 in ms.`,
  ``,
];
for (const r of runs) {
  const a = r.summary["python3.11"]!;
  const b = r.summary["python3.12"]!;
  lines.push(
    `## ${r.isolation}`,
    ``,
    `| step | python3.11 | python3.12 | 3.12 / 3.11 |`,
    `|---|---|---|---|`,
  );
  for (const [k, label] of ROWS)
    lines.push(`| ${label} | ${ms(a[k]!)} | ${ms(b[k]!)} | ${(b[k]! / a[k]!).toFixed(2)}× |`);
  lines.push(``);
}
mkdirSync(OUT, { recursive: true });
const stem = join(OUT, `${started.toISOString().slice(0, 10)}-py-gap`);
writeFileSync(
  `${stem}.json`,
  JSON.stringify({ started, rounds, gapMs: GAP_MS, runs }, null, 2) + "\n",
);
writeFileSync(`${stem}.md`, lines.join("\n"));
process.stdout.write(lines.join("\n") + `\nwritten: ${stem}.md\n`);
