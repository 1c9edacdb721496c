/**
 * The docs whose limits and settings `test/schema/docs.unit.test.ts` checks, relative to the repository
 * root.
 */
export const GENERATED_DOCS = [
  "README.md",
  "docs/ARCHITECTURE.md",
  "docs/SECURITY.md",
  "docs/SPECIFICATION.md",
  "docs/THREAT-MODEL.md",
  "docs/PROTOCOL.md",
] as const;
