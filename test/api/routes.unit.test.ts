// The service's routes are data, so the OpenAPI document and the table can be held together:
// every JSON route the table answers is documented with its method, and every documented one is
// answered. The HTML pages (/console..., /oauth/consent), the site's icon, CORS preflights, /mcp (MCP's own
// transport) and the document itself are not in it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { restRoutes, type RestDeps } from "../../src/api/rest.js";
import { consoleRoutes, type ConsoleDeps } from "../../src/console/routes.js";
import type { Metrics } from "../../src/http/metrics.js";
import { probeRoutes } from "../../src/http/probes.js";
import { oauthRoutes, type OAuthRouteDeps } from "../../src/oauth/routes.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "../../..");

/** The rows startApiServer puts in its table, built on stand-ins that no row is asked to run. */
const table = [
  ...probeRoutes({} as Metrics, () => ({ status: "ready" })),
  ...oauthRoutes({} as OAuthRouteDeps),
  ...consoleRoutes({
    config: { issuer: "http://127.0.0.1:8787" },
    oidc: { signsIn: true },
  } as unknown as ConsoleDeps),
  ...restRoutes({} as RestDeps).routes,
];

const UNDOCUMENTED = (method: string, path: string) =>
  method === "OPTIONS" ||
  path === "/mcp" ||
  path === "/openapi.json" ||
  path.startsWith("/console") ||
  path === "/favicon.ico" ||
  path === "/oauth/consent";

describe("the service's table and its OpenAPI document", () => {
  const openapi = JSON.parse(readFileSync(join(ROOT, "openapi/openapi.json"), "utf8")) as {
    paths: Record<string, Record<string, unknown>>;
  };
  const documented = Object.entries(openapi.paths)
    .flatMap(([path, ops]) =>
      Object.keys(ops)
        .filter((k) => ["get", "post", "put", "delete"].includes(k))
        .map((m) => `${m.toUpperCase()} ${path}`),
    )
    .sort();
  const answered = table
    .filter((r) => !UNDOCUMENTED(r.method, r.path))
    .map((r) => `${r.method} ${r.path}`)
    .sort();

  test("name the same JSON routes, each with its method and its path's parameters", () => {
    assert.deepEqual(answered, documented);
  });

  test("no row is in the table twice", () => {
    const rows = table.map((r) => `${r.method} ${r.path}`);
    assert.deepEqual(
      rows.filter((r, i) => rows.indexOf(r) !== i),
      [],
    );
  });
});
