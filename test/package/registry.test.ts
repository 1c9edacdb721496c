import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { compileSchema, errorsOf } from "./json-schema.js";

// server.json is what the official MCP registry lists; the registry checks it against its schema
// (a copy in registry/, see registry/README.md) and the npm package's mcpName against its name.
const read = (p: string) => JSON.parse(readFileSync(join(REPO_ROOT, p), "utf8")) as unknown;
const schema = read("registry/server.schema.json") as { $id: string };
const server = read("server.json") as {
  $schema: string;
  name: string;
  version: string;
  packages: {
    registryType: string;
    identifier: string;
    version: string;
    transport: { type: string };
    environmentVariables: { name: string; isSecret?: boolean; isRequired?: boolean }[];
  }[];
};
const pkg = read("package.json") as {
  name: string;
  version: string;
  mcpName: string;
  files: string[];
};
const validate = compileSchema(schema);

describe("MCP registry: server.json", () => {
  test("validates against the registry's schema, and names the schema it was checked against", () => {
    assert.ok(validate(server), errorsOf(validate));
    assert.equal(server.$schema, schema.$id);
  });

  test("the schema is not vacuous: broken copies of server.json fail it", () => {
    const broken: [string, (s: Record<string, unknown>) => void][] = [
      ["no description", (s) => delete s.description],
      ["a name without a namespace", (s) => (s.name = "scratchrun")],
      ["a description over 100 characters", (s) => (s.description = "x".repeat(101))],
      [
        "a package without a transport",
        (s) => delete (s.packages as object[] as { transport?: unknown }[])[0]!.transport,
      ],
      [
        "a package version 'latest'",
        (s) => ((s.packages as { version: string }[])[0]!.version = "latest"),
      ],
    ];
    for (const [what, mutate] of broken) {
      const copy = structuredClone(server) as unknown as Record<string, unknown>;
      mutate(copy);
      assert.equal(validate(copy), false, `${what} should be rejected`);
    }
  });

  test("matches package.json: mcpName, version, npm identifier, stdio, published file", () => {
    assert.equal(server.name, pkg.mcpName, "the registry checks the package's mcpName against it");
    assert.equal(server.version, pkg.version);
    const [npm, ...others] = server.packages;
    assert.deepEqual(others, []);
    assert.equal(npm?.registryType, "npm");
    assert.equal(npm?.identifier, pkg.name);
    assert.equal(npm?.version, pkg.version);
    assert.equal(npm?.transport.type, "stdio");
    assert.ok(pkg.files.includes("server.json"));
  });

  test("the environment: SCRATCHRUN_URL and SCRATCHRUN_API_KEY, optional (local mode needs neither), the key secret", () => {
    const env = Object.fromEntries(
      server.packages[0]!.environmentVariables.map((v) => [v.name, v]),
    );
    assert.deepEqual(Object.keys(env).sort(), ["SCRATCHRUN_API_KEY", "SCRATCHRUN_URL"]);
    assert.equal(env.SCRATCHRUN_API_KEY?.isSecret, true);
    assert.equal(env.SCRATCHRUN_URL?.isSecret, false);
    assert.equal(env.SCRATCHRUN_API_KEY?.isRequired, false);
    assert.equal(env.SCRATCHRUN_URL?.isRequired, false);
  });

  test("a remote: the service's /mcp on the operator's host, the key sent as a secret header", () => {
    const { remotes } = server as unknown as {
      remotes: {
        type: string;
        url: string;
        headers: { name: string; isSecret?: boolean }[];
        variables: Record<string, unknown>;
      }[];
    };
    assert.equal(remotes.length, 1);
    assert.equal(remotes[0]!.type, "streamable-http");
    assert.equal(remotes[0]!.url, "https://{host}/mcp");
    assert.deepEqual(Object.keys(remotes[0]!.variables), ["host"]);
    assert.deepEqual(remotes[0]!.headers, [
      { ...remotes[0]!.headers[0], name: "Authorization", isSecret: true },
    ]);
  });
});
