// The folders of src/ are the layers (docs/ARCHITECTURE.md, "Module map", "Layers"): data flows
// down, so a file may import its own layer and the layers below it, never one above, and no files
// import each other in a circle. This walks every import under src/ and names what breaks either.
import assert from "node:assert/strict";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, posix, relative } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";

/**
 * Top to bottom. A layer is a folder of src/, or a file at its top (errors.ts, version.ts). A
 * new folder fails the test until it is placed here.
 */
export const LAYERS = [
  "bin", // the executables
  "cli", // every command
  "compose", // engines and their networks built from the environment
  "remote", // remote mode's client (it speaks the API's wire, api/wire.ts)
  "cluster", // the api and worker roles, dispatch, worker discovery
  "api", // the public service: REST, /mcp, OpenAPI
  "console", // sign-in, sessions, the consent page (server-rendered)
  "oauth", // the authorization server: metadata, authorize, token, register
  "mcp", // tools, results as MCP content
  "store", // keys, runs, leases, quotas in SQLite or Postgres
  "engine", // execute(request) -> result
  "http", // plumbing both servers share: router, body, refusals, auth, listener, log, metrics
  "backends", // pool, call path, microvm/, namespace/
  "protocol", // the host side of the guest agent's protocol
  "images", // rootfs and VM image builds, manifest, locator
  "policy", // caller policy and quotas
  "schema", // the zod schemas, limits and settings
  "runtimes", // what a runtime is: names, table, paths in the image
  "net", // per-sandbox network, nftables, egress proxy
  "jail", // cgroups, seccomp, uids, reaping
  "errors.ts",
  "version.ts",
] as const;

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "../../..");

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith(".ts") ? [relative(ROOT, path).split("\\").join("/")] : [];
  });
}

/** Each file of src/ with the files of src/ it imports (import, export … from, import()). */
export function importGraph(files: readonly string[], read: (file: string) => string) {
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const targets = ts
      .preProcessFile(read(file), true, true)
      .importedFiles.map((i) => i.fileName)
      .filter((spec) => spec.startsWith("."))
      .map((spec) => posix.join(posix.dirname(file), spec).replace(/\.js$/, ".ts"))
      .filter((target) => target.startsWith("src/"));
    graph.set(file, [...new Set(targets)]);
  }
  return graph;
}

/** The layer of a file of src/: its first folder, or its own name at the top. */
export function layerOf(file: string): string {
  return file.split("/")[1] ?? file;
}

/** "a imports b" for every import that runs up the list, or into a layer the list lacks. */
export function upwardImports(graph: ReadonlyMap<string, readonly string[]>): string[] {
  const rank = (file: string) => (LAYERS as readonly string[]).indexOf(layerOf(file));
  const out: string[] = [];
  for (const [file, targets] of graph) {
    if (rank(file) < 0) out.push(`${file} is in no layer (add its folder to LAYERS)`);
    for (const target of targets)
      if (rank(target) < rank(file)) out.push(`${file} imports ${target}`);
  }
  return out;
}

/** The circles: every set of two or more files that reach each other (Tarjan's components). */
export function circles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (file: string) => {
    index.set(file, index.size);
    low.set(file, index.get(file)!);
    stack.push(file);
    onStack.add(file);
    for (const target of graph.get(file) ?? []) {
      if (!index.has(target)) {
        visit(target);
        low.set(file, Math.min(low.get(file)!, low.get(target)!));
      } else if (onStack.has(target)) low.set(file, Math.min(low.get(file)!, index.get(target)!));
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    let top: string;
    do {
      top = stack.pop()!;
      onStack.delete(top);
      component.push(top);
    } while (top !== file);
    if (component.length > 1 || graph.get(file)?.includes(file)) out.push(component.sort());
  };
  for (const file of graph.keys()) if (!index.has(file)) visit(file);
  return out;
}

describe("the folders of src/ are the layers", () => {
  const files = sourceFiles(join(ROOT, "src"));
  const graph = importGraph(files, (file) => readFileSync(join(ROOT, file), "utf8"));

  test("the walk sees the tree (every file, and the imports between them)", () => {
    assert.ok(files.length > 100, `${files.length} files under src/`);
    assert.ok([...graph.values()].flat().length > 400, "imports found");
  });

  test("no import runs up a layer", () => {
    assert.deepEqual(upwardImports(graph), []);
  });

  test("no files import each other in a circle", () => {
    // A circle is named by its files (sorted), not by the order they import each other in.
    assert.deepEqual(
      circles(graph).map((c) => `circle: ${c.join(", ")}`),
      [],
    );
  });

  test("the checks catch an upward import and a circle", () => {
    const made = new Map([
      ["src/net/a.ts", ["src/api/server.ts", "src/net/b.ts"]],
      ["src/net/b.ts", ["src/net/a.ts"]],
      ["src/api/server.ts", []],
    ]);
    assert.deepEqual(upwardImports(made), ["src/net/a.ts imports src/api/server.ts"]);
    assert.deepEqual(circles(made), [["src/net/a.ts", "src/net/b.ts"]]);
  });
});
