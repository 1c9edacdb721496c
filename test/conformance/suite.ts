import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse } from "yaml";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { conformanceCli } from "../node-legs/legs.js";

/** The revisions the suite speaks: the initialize era and the stateless one. */
export const REVISIONS = ["2025-11-25", "2026-07-28"] as const;
export type Revision = (typeof REVISIONS)[number];

export interface Check {
  id: string;
  status: "SUCCESS" | "FAILURE" | "WARNING" | "INFO" | "SKIPPED";
  errorMessage?: string;
}

/** One scenario's checks; it fails when any check is a FAILURE (the suite's own rule). */
export interface Scenario {
  name: string;
  checks: Check[];
  failed: Check[];
}

/**
 * Runs every server scenario the suite has for `revision` (`--suite all`: pending ones included)
 * against `url`, and reads each scenario's checks.json.
 */
export function runSuite(url: string, revision: Revision): Promise<Map<string, Scenario>> {
  return runCli([["--url", url, "--suite", "all", "--spec-version", revision]]);
}

/**
 * Runs the named scenarios, one run each: the extensions' scenarios (tasks) belong to no
 * revision, so `--suite` never picks them.
 */
export function runScenarios(url: string, names: string[]): Promise<Map<string, Scenario>> {
  return runCli(names.map((name) => ["--url", url, "--scenario", name]));
}

async function runCli(runs: string[][]): Promise<Map<string, Scenario>> {
  const cli = conformanceCli();
  const out = mkdtempSync(join(tmpdir(), "sr-conformance-"));
  try {
    let log = "";
    for (const args of runs) {
      const child = spawn(cli.node, [cli.script, "server", ...args, "--output-dir", out], {
        cwd: out,
        stdio: ["ignore", "pipe", "pipe"],
      });
      child.stdout.on("data", (d: Buffer) => (log += d.toString()));
      child.stderr.on("data", (d: Buffer) => (log += d.toString()));
      // Its exit status says whether anything failed; the baseline decides what that means.
      await new Promise((resolve) => child.once("close", resolve));
    }
    const scenarios = new Map<string, Scenario>();
    for (const dir of readdirSync(out)) {
      const m = /^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$/.exec(dir);
      if (!m) continue;
      const checks = JSON.parse(readFileSync(join(out, dir, "checks.json"), "utf8")) as Check[];
      scenarios.set(m[1]!, {
        name: m[1]!,
        checks,
        failed: checks.filter((c) => c.status === "FAILURE"),
      });
    }
    if (scenarios.size === 0) throw new Error(`the conformance suite ran nothing:\n${log}`);
    return scenarios;
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

/**
 * test/conformance/baseline.yaml: what may fail on a leg, and why: its `fixtures` (every leg)
 * and the leg's own section. A key is a scenario (all its checks may fail) or
 * `scenario:check-id` (that check alone; the scenario's other checks must pass).
 */
export function readBaseline(leg: "mcp" | "stdio"): Map<string, string> {
  const text = readFileSync(join(REPO_ROOT, "test/conformance/baseline.yaml"), "utf8");
  const doc = parse(text) as Record<string, Record<string, string> | null>;
  return new Map([...Object.entries(doc.fixtures ?? {}), ...Object.entries(doc[leg] ?? {})]);
}

/**
 * What a run says against the baseline: failures nobody listed, and listed failures that ran and
 * passed (the entry is stale and must go). A listed check that did not run is no news: a scenario
 * that stops at a failed step never reaches its later checks. Empty when all is as it should be.
 */
export function judge(
  scenarios: Map<string, Scenario>,
  baseline: Map<string, string>,
  leg: string,
): string[] {
  const problems: string[] = [];
  const stale = (key: string) =>
    problems.push(
      `${leg}: ${key} passes now: remove it from test/conformance/baseline.yaml ("${baseline.get(key)}")`,
    );
  for (const s of scenarios.values()) {
    if (baseline.has(s.name)) {
      if (s.failed.length === 0) stale(s.name);
      continue;
    }
    for (const c of s.failed)
      if (!baseline.has(`${s.name}:${c.id}`))
        problems.push(
          `${leg}: ${s.name} fails ${c.id}, not in the baseline: ${c.errorMessage ?? "(no message)"}`,
        );
    for (const c of s.checks)
      if (
        c.status === "SUCCESS" &&
        baseline.has(`${s.name}:${c.id}`) &&
        !s.failed.some((f) => f.id === c.id)
      )
        stale(`${s.name}:${c.id}`);
  }
  return problems;
}
