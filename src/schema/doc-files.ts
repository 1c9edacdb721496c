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
  "docs/INSTALL.md",
  "docs/SPEED.md",
  "docs/RUNTIMES.md",
  "docs/SERVICE.md",
  "docs/CONFIGURATION.md",
] as const;
