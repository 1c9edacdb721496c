import { runtimeEntry } from "../src/runtimes/table.js";
import { RUNTIMES, type RuntimeName } from "../src/schema/exec.js";

export type WorkloadId = "print" | "realistic" | "product" | "pandas";

/** One piece of code every system runs unchanged, and how to tell that it really ran. */
export interface Workload {
  id: WorkloadId | "tti";
  runtime: RuntimeName;
  code: string;
  /**
   * Files the code writes and the caller wants back: relative to the working directory, or
   * absolute under /tmp (the floor systems give the call a /tmp of its own for those).
   */
  returnFiles: string[];
  /** Files sent with the call (`files`), relative to the working directory. */
  files?: Record<string, string>;
  /** Distributions the runtime must have (from the image manifest), else "not measurable". */
  needs?: string[];
  /** True when stdout and the returned files (keyed as in returnFiles) prove the code did its work. */
  check(stdout: string, files: Record<string, number>): boolean;
}

const PRINT: Record<RuntimeName, string> = {
  "python3.12": "print(1)",
  "python3.11": "print(1)",
  "python3.13": "print(1)",
  node20: "console.log(1)",
  node24: "console.log(1)",
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
      needs: ["numpy", "matplotlib"],
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

/** The product page's own example, verbatim: a sine plot saved to /tmp and returned inline. */
export const PRODUCT_EXAMPLE =
  "import matplotlib.pyplot as plt\nimport numpy as np\nx = np.linspace(0, 10, 100)\nplt.plot(x, np.sin(x))\nplt.savefig('/tmp/plot.png')";

export function productWorkload(runtime: RuntimeName): Workload | null {
  if (runtime !== "python3.11" && runtime !== "python3.12") return null;
  return {
    id: "product",
    runtime,
    code: PRODUCT_EXAMPLE,
    returnFiles: ["/tmp/plot.png"],
    needs: ["numpy", "matplotlib"],
    check: (stdout, files) => stdout === "" && (files["/tmp/plot.png"] ?? 0) > 1000,
  };
}

/** Rows of the pandas workload's CSV (deterministic, ~1 MB). */
export const SALES_ROWS = 31_000;

/** A deterministic ~1 MB sales CSV: date, category, region, units, amount. */
export function salesCsv(rows = SALES_ROWS): string {
  const categories = ["books", "games", "garden", "kitchen", "music", "sports", "toys", "tools"];
  const regions = ["north", "south", "east", "west"];
  const out = ["date,category,region,units,amount"];
  let x = 20261201;
  // xorshift32: integer-exact in JavaScript, the same file on every run.
  const next = () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return x >>> 0;
  };
  for (let i = 0; i < rows; i++) {
    const day = String((next() % 28) + 1).padStart(2, "0");
    const month = String((next() % 12) + 1).padStart(2, "0");
    const units = (next() % 40) + 1;
    const amount = ((next() % 100_000) / 100).toFixed(2);
    out.push(
      `2026-${month}-${day},${categories[next() % 8]},${regions[next() % 4]},${units},${amount}`,
    );
  }
  return `${out.join("\n")}\n`;
}

const PANDAS_PLOT = [
  "import pandas as pd",
  "import matplotlib.pyplot as plt",
  'df = pd.read_csv("sales.csv", parse_dates=["date"])',
  'by = df.groupby("category")["amount"].agg(["sum", "mean", "count"]).sort_values("sum")',
  'ax = by["sum"].plot.barh(figsize=(6, 4), title="sales by category")',
  'ax.set_xlabel("amount")',
  "plt.tight_layout()",
  'plt.savefig("sales.png", dpi=100)',
  'print(len(df), int(by["count"].sum()))',
].join("\n");

/** pandas reads a 1 MB CSV sent in `files`, groups it and returns a bar chart. */
export function pandasWorkload(runtime: RuntimeName): Workload | null {
  if (runtime !== "python3.11" && runtime !== "python3.12") return null;
  return {
    id: "pandas",
    runtime,
    code: PANDAS_PLOT,
    files: { "sales.csv": salesCsv() },
    returnFiles: ["sales.png"],
    needs: ["pandas", "matplotlib"],
    check: (stdout, files) =>
      stdout.trim() === `${SALES_ROWS} ${SALES_ROWS}` && (files["sales.png"] ?? 0) > 1000,
  };
}

/**
 * The peers' "time to interactive" (issue 30): a fresh sandbox runs one shell command. In
 * ScratchRun that is a bash call whose code is the command (PATH finds the image's node and
 * python3, as a sandbox's shell does).
 */
export const TTI_COMMANDS = ["node -v", "python3 -c 'print(1)'"] as const;
export type TtiCommand = (typeof TTI_COMMANDS)[number];

export function ttiWorkload(command: TtiCommand): Workload {
  return {
    id: "tti",
    runtime: "bash",
    code: command,
    returnFiles: [],
    check:
      command === "node -v"
        ? (stdout) => /^v\d+\.\d+\.\d+$/.test(stdout.trim())
        : (stdout) => stdout.trim() === "1",
  };
}

/** Every workload of one id for a runtime, or null where it does not apply. */
export function workloadFor(id: WorkloadId, runtime: RuntimeName): Workload | null {
  switch (id) {
    case "print":
      return printWorkload(runtime);
    case "realistic":
      return realisticWorkload(runtime);
    case "product":
      return productWorkload(runtime);
    case "pandas":
      return pandasWorkload(runtime);
  }
}

/** File name each interpreter gets its code in (as the product names it). */
export const CODE_FILE: Record<RuntimeName, string> = Object.fromEntries(
  RUNTIMES.map((r) => [r, runtimeEntry(r).codeFile]),
) as Record<RuntimeName, string>;
