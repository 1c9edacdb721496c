import { parseArgs } from "node:util";
import { openDatabase } from "../store/db.js";
import { scratchrunHome } from "../store/home.js";
import { KeyStore } from "../store/keys.js";

export const KEYS_USAGE = `scratchrun keys create --name N    create a key; it is printed once, on stdout
scratchrun keys list [--json]        list keys (never the keys themselves)
scratchrun keys revoke <id|name>     revoke a key at once
`;

const iso = (ms: number | null) => (ms === null ? "-" : new Date(ms).toISOString());

/** `scratchrun keys …` on the database in SCRATCHRUN_HOME (works while a server runs). */
export function runKeys(argv: string[], env: NodeJS.ProcessEnv = process.env): number {
  const [sub, ...rest] = argv;
  const { values, positionals } = parseArgs({
    args: rest,
    options: { name: { type: "string" }, json: { type: "boolean" } },
    allowPositionals: true,
    strict: true,
  });
  const db = openDatabase(scratchrunHome(env));
  try {
    const keys = new KeyStore(db);
    switch (sub) {
      case "create": {
        if (!values.name) break;
        const { id, key } = keys.create(values.name);
        process.stderr.write(`created key ${id} (${values.name}); it is shown only now:\n`);
        process.stdout.write(`${key}\n`);
        return 0;
      }
      case "list": {
        const list = keys.list();
        if (values.json) {
          process.stdout.write(`${JSON.stringify(list, null, 2)}\n`);
          return 0;
        }
        for (const k of list)
          process.stdout.write(
            `${k.id}  ${k.revokedAt === null ? "active " : "revoked"}  created ${iso(k.createdAt)}  last used ${iso(k.lastUsedAt)}  ${k.name}\n`,
          );
        return 0;
      }
      case "revoke": {
        const target = positionals[0];
        if (!target) break;
        const ids = keys.revoke(target);
        if (ids.length === 0) {
          process.stderr.write(
            `scratchrun: no active key with id or name ${JSON.stringify(target)}\n`,
          );
          return 1;
        }
        process.stderr.write(`revoked ${ids.join(", ")}\n`);
        return 0;
      }
    }
    process.stderr.write(KEYS_USAGE);
    return 2;
  } finally {
    db.close();
  }
}
