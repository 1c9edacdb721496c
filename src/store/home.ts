// The state directory itself is a setting: `home` of src/schema/settings/values.ts.
export const DATABASE_FILE = "scratchrun.db";
export const LOCK_FILE = "server.pid";
