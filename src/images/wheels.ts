import { readdirSync } from "node:fs";

/** The wheels of a wheelhouse, sorted by name. */
export function listWheels(dir: string): string[] {
  return readdirSync(dir)
    .filter((n) => n.endsWith(".whl"))
    .sort();
}
