/**
 * The runtimes a call may name (the schema's enum, before any policy narrows it). At the bottom of
 * the runtime layer, so that the schema, the image manifest and the runtime table all take the
 * names from one place below them.
 */
export const RUNTIMES = [
  "python3.12",
  "python3.11",
  "node20",
  "bash",
  "python3.13",
  "node24",
] as const;
/** The product page's runtimes (its promises are made for these four). */
export const PRODUCT_RUNTIMES = ["python3.12", "python3.11", "node20", "bash"] as const;
export type RuntimeName = (typeof RUNTIMES)[number];
