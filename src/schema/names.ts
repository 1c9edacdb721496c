/** The runtimes and network modes a call may name (the schema's enums, before any policy narrows them). */
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

export const NETWORK_MODES = ["public", "none"] as const;
export type NetworkChoice = (typeof NETWORK_MODES)[number];
