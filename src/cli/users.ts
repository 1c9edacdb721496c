import { parseArgs } from "node:util";
import { openStore } from "../store/open.js";
import { PASSWORD_MIN } from "../store/users.js";

export const USERS_USAGE = `scratchrun users create --name N [--role admin|member] [--oidc-subject SUB]
                                           a console user; the password is read from stdin (one
                                           line, ${PASSWORD_MIN}+ characters; may be empty with
                                           --oidc-subject: they sign in through the OIDC issuer)
scratchrun users list                      the console's users and roles

An admin sees and approves for every API key; a member only the keys made with --owner NAME.
`;

/** Reads stdin to its end (a password piped in, never an argument: argv is visible in ps). */
async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks).toString("utf8");
}

/**
 * `scratchrun users …` on the same store as `keys` (SQLite in SCRATCHRUN_HOME, or the shared
 * Postgres): console users who sign in at /console/signin and approve OAuth clients.
 */
export async function runUsers(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
  readPassword: () => Promise<string> = readStdin,
): Promise<number> {
  const [sub, ...rest] = argv;
  let values: {
    name?: string | undefined;
    role?: string | undefined;
    "oidc-subject"?: string | undefined;
  };
  try {
    ({ values } = parseArgs({
      args: rest,
      options: {
        name: { type: "string" },
        role: { type: "string" },
        "oidc-subject": { type: "string" },
      },
      strict: true,
    }));
  } catch (e) {
    process.stderr.write(`scratchrun users: ${e instanceof Error ? e.message : String(e)}\n`);
    return 2;
  }
  if (sub === "create" && values.name) {
    const role = values.role ?? "member";
    const password = (await readPassword()).replace(/\r?\n$/, "");
    const store = await openStore(env);
    try {
      const user = await store.users.create(
        values.name,
        role as "admin" | "member",
        password,
        Date.now(),
        values["oidc-subject"] ?? null,
      );
      process.stderr.write(`created ${user.role} ${user.name} (${user.id})\n`);
      return 0;
    } catch (e) {
      if (!(e instanceof TypeError)) throw e;
      process.stderr.write(`scratchrun users create: ${e.message}\n`);
      return 2;
    } finally {
      await store.close();
    }
  }
  if (sub === "list") {
    const store = await openStore(env);
    try {
      for (const u of await store.users.list())
        process.stdout.write(`${u.id}  ${u.role.padEnd(6)}  ${u.name}\n`);
      return 0;
    } finally {
      await store.close();
    }
  }
  process.stderr.write(USERS_USAGE);
  return 2;
}
