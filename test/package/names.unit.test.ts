// Our name, everywhere a user copies it from (issue 44): every install line in the README, the
// docs, server.json and the MCPB manifest names the package package.json publishes. The hosted
// service's own client, `@scratchrun/mcp-server` on the npm registry, is not ours: it may appear
// only where the README says so, never in a command. (test/package/install.test.ts runs the
// README's commands verbatim against a local registry that serves only our name.)
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

/** The repository root (this file is dist/test/package/names.unit.test.js once built). */
const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

const read = (p: string) => readFileSync(join(REPO_ROOT, p), "utf8");
const pkg = JSON.parse(read("package.json")) as {
  name: string;
  mcpName: string;
  bin: Record<string, string>;
};
const NAME = pkg.name;
const HOSTED = "@scratchrun/mcp-server";

/** The files a user copies commands from: README, docs/, the container and deploy recipes. */
function docFiles(): string[] {
  const out = ["README.md"];
  const walk = (dir: string) => {
    for (const name of readdirSync(join(REPO_ROOT, dir))) {
      const p = join(dir, name);
      if (statSync(join(REPO_ROOT, p)).isDirectory()) walk(p);
      else if (/\.(md|sh|ya?ml|json)$|Containerfile$/.test(name)) out.push(p);
    }
  };
  for (const d of ["docs", "container", "deploy", "mcpb", "registry"]) walk(d);
  return out.map((p) => relative(REPO_ROOT, join(REPO_ROOT, p)));
}

/** The package each `npx …`, `npm install …` or `npm exec …` in `text` names, with its line. */
function installedPackages(text: string): Array<{ pkg: string; line: string }> {
  const out: Array<{ pkg: string; line: string }> = [];
  const command =
    /\b(?:npx|npm\s+(?:install|i|exec))((?:\s+--?[a-z][\w-]*(?:=\S+)?)*)\s+([^\s`"'),;]+)/g;
  for (const line of text.split("\n"))
    for (const m of line.matchAll(command)) {
      const flags = m[1] ?? "";
      let spec = m[2] ?? "";
      // `npx -p PKG bin`: the package is -p's.
      const p = /(?:^|\s)(?:-p|--package)(?:=|\s+)(\S+)/.exec(flags);
      if (p?.[1]) spec = p[1];
      // A packed tarball counts as the package it is named for (NAME-VERSION.tgz).
      const tarball = /(?:^|\/)([^/]+)-[^-/]+\.tgz$/.exec(spec);
      out.push({ pkg: tarball?.[1] ?? spec.replace(/(?<=.)@[^/]*$/, ""), line: line.trim() });
    }
  return out;
}

describe("the package's name, in every install line", () => {
  test("the finder sees each form of an install line", () => {
    assert.deepEqual(
      installedPackages(
        [
          "run `npx -y scratchrun-mcp setup` then",
          "npm install -g some-pkg@1.2.3 --allow-scripts=x",
          'args: ["-y", "x"] and npx --no-install scratchrun-mcp',
          "npx -p other-pkg@2 bin",
          "npm i @scope/name",
          "npm install -g /tmp/scratchrun-mcp-*.tgz",
        ].join("\n"),
      ).map((e) => e.pkg),
      [
        "scratchrun-mcp",
        "some-pkg",
        "scratchrun-mcp",
        "other-pkg",
        "@scope/name",
        "scratchrun-mcp",
      ],
    );
  });

  test("every install line naming ScratchRun names the package package.json publishes", () => {
    const wrong: string[] = [];
    let ours = 0;
    for (const file of docFiles())
      for (const { pkg: p, line } of installedPackages(read(file))) {
        if (!/scratchrun/i.test(p)) continue;
        if (p === NAME) ours += 1;
        else wrong.push(`${file}: ${p} in: ${line}`);
      }
    assert.deepEqual(wrong, []);
    assert.ok(ours >= 3, `the README and docs show how to install ${NAME} (${ours} lines)`);
  });

  test("MCP configs in the docs start our package: an npx args list names it", () => {
    const wrong: string[] = [];
    for (const file of docFiles()) {
      const text = read(file);
      for (const m of text.matchAll(/"args":\s*\[\s*"-y",\s*"([^"]+)"/g))
        if (m[1] !== NAME) wrong.push(`${file}: ${m[1]}`);
    }
    assert.deepEqual(wrong, []);
  });

  test("the hosted service's client is never a command, and the README says once that it is not ours", () => {
    // Install lines naming it fail the test above (it is not NAME); here the README's word on it.
    const seen = read("README.md")
      .split("\n")
      .flatMap((line, i) => (line.includes(HOSTED) ? [`README.md:${i + 1}: ${line.trim()}`] : []));
    assert.equal(seen.length, 1, seen.join("\n"));
    assert.match(seen[0] ?? "", /hosted/i);
    assert.match(seen[0] ?? "", /not this project/i);
    assert.ok(
      read("README.md").split("\n").slice(0, 40).join("\n").includes(HOSTED),
      "within the README's first 40 lines",
    );
  });

  test("server.json and the MCPB manifest name the same package; no site we do not own", () => {
    const server = JSON.parse(read("server.json")) as {
      name: string;
      websiteUrl?: string;
      packages: { identifier: string }[];
    };
    assert.equal(server.name, pkg.mcpName);
    assert.equal(server.websiteUrl, undefined);
    assert.deepEqual(
      server.packages.map((p) => p.identifier),
      [NAME],
    );
    const manifest = JSON.parse(read("mcpb/manifest.json")) as {
      server: { entry_point: string; mcp_config: { args: string[] } };
    };
    assert.equal(
      manifest.server.entry_point,
      `node_modules/${NAME}/dist/src/bin/scratchrun-mcp.js`,
    );
    assert.ok(manifest.server.mcp_config.args.every((a) => a.includes(`/node_modules/${NAME}/`)));
    // npx runs the bin named like the package: it must be the stdio server.
    assert.equal(pkg.bin[NAME], "dist/src/bin/scratchrun-mcp.js");
    for (const ignored of read("mcpb/.mcpbignore")
      .split("\n")
      .filter((l) => l.startsWith("node_modules/")))
      assert.ok(ignored.startsWith(`node_modules/${NAME}/`), ignored);
  });
});
