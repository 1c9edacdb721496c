import type { RuntimeName } from "../src/schema/exec.js";

export type WorkloadId = "print" | "realistic";

/** One piece of code every system runs unchanged, and how to tell that it really ran. */
export interface Workload {
  id: WorkloadId;
  runtime: RuntimeName;
  code: string;
  /** Working-directory-relative files the code writes and the caller wants back. */
  returnFiles: string[];
  /** True when stdout and the returned files prove the code did its work. */
  check(stdout: string, files: Record<string, number>): boolean;
}

const PRINT: Record<RuntimeName, string> = {
  "python3.12": "print(1)",
  "python3.11": "print(1)",
  node20: "console.log(1)",
  bash: "echo 1",
};

const PY_PLOT = [
  "import numpy as np",
  "import matplotlib",
  'matplotlib.use("Agg")',
  "import matplotlib.pyplot as plt",
  "x = np.linspace(0, 10, 500)",
  "fig, ax = plt.subplots(figsize=(4, 3))",
  "ax.plot(x, np.sin(x) * np.exp(-x / 5))",
  'fig.savefig("plot.png", dpi=80)',
  'print("ok", round(float(np.sin(x).sum()), 3))',
].join("\n");

const NODE_JSON = [
  'const fs = require("node:fs");',
  "const rows = Array.from({ length: 2000 }, (_, i) => ({ i, sq: i * i, s: String(i) }));",
  'fs.writeFileSync("out.json", JSON.stringify({ rows }));',
  'console.log("ok", rows.length);',
].join("\n");

export function printWorkload(runtime: RuntimeName): Workload {
  return {
    id: "print",
    runtime,
    code: PRINT[runtime],
    returnFiles: [],
    check: (stdout) => stdout.trim() === "1",
  };
}

/** The realistic calls: a numpy + matplotlib PNG (python3.11), a JSON file (node20). */
export function realisticWorkload(runtime: RuntimeName): Workload | null {
  if (runtime === "python3.11")
    return {
      id: "realistic",
      runtime,
      code: PY_PLOT,
      returnFiles: ["plot.png"],
      check: (stdout, files) => stdout.startsWith("ok ") && (files["plot.png"] ?? 0) > 1000,
    };
  if (runtime === "node20")
    return {
      id: "realistic",
      runtime,
      code: NODE_JSON,
      returnFiles: ["out.json"],
      check: (stdout, files) => stdout.trim() === "ok 2000" && (files["out.json"] ?? 0) > 10_000,
    };
  return null;
}

/** File name each interpreter gets its code in (as the product names it). */
export const CODE_FILE: Record<RuntimeName, string> = {
  "python3.12": "main.py",
  "python3.11": "main.py",
  node20: "main.js",
  bash: "main.sh",
};
