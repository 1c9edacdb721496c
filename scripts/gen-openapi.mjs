// Writes openapi/openapi.json from the zod schemas (the service test keeps the two equal).
// Run after changing src/schema/: npm run build && node scripts/gen-openapi.mjs && npx prettier --write openapi
import { writeFileSync } from "node:fs";
import { buildOpenApiDocument } from "../dist/src/api/openapi.js";

writeFileSync(
  new URL("../openapi/openapi.json", import.meta.url),
  `${JSON.stringify(buildOpenApiDocument(), null, 2)}\n`,
);
console.log("openapi/openapi.json written");
