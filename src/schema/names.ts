/** The network modes a call may name (the schema's enum, before any policy narrows it). */
export const NETWORK_MODES = ["public", "none"] as const;
export type NetworkMode = (typeof NETWORK_MODES)[number];
