import { parseArgs } from "node:util";
import { openStore } from "../store/open.js";
import { PASSWORD_MIN } from "../store/users.js";
import { inviteLink } from "../console/people.js";
import { publicUrlFromEnv } from "./serve.js";
import { settingsFrom } from "../schema/settings/values.js";

export const USERS_USAGE = `scratchrun users create --name N [--role admin|member] [--oidc-subject SUB]
                                           a console user; the password is read from stdin (one
                                           line, ${PASSWORD_MIN}+ characters; may be empty with
                                           --oidc-subject: they sign in through the OIDC issuer)
scratchrun users invite --name N [--role admin|member]
                                           a one-time link (24 h) that makes the user N once
                                           its holder chooses a password; printed on stdout,
                                           with SCRATCHRUN_PUBLIC_URL in front when it is set
scratchrun users list                      the console's users and roles
scratchrun users role --name N --role admin|member
                                           change a user's role (from their next request)
scratchrun users reset --name N            a new password, read from stdin as for create; the
                                           user is signed out everywhere and their lock lifted
scratchrun users remove --name N           remove a user: their sessions end and the keys they
                                           own are revoked
Each of create, invite, role, reset and remove is written to the console's audit log (as "cli").

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
    const store = await openStore(settingsFrom(env));
    try {
      const user = await store.users.create(
        values.name,
        role as "admin" | "member",
        password,
        Date.now(),
        values["oidc-subject"] ?? null,
      );
      await store.users.audit.record({
        actorId: null,
        actor: "cli",
        address: null,
        action: "user.create",
        target: user.id,
        detail: { name: user.name, role: user.role, oidc_subject: values["oidc-subject"] ?? null },
      });
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
  if (sub === "invite" && values.name) {
    let base: string;
    try {
      base = publicUrlFromEnv(env) ?? "";
    } catch (e) {
      process.stderr.write(`scratchrun users invite: ${(e as Error).message}\n`);
      return 2;
    }
    const store = await openStore(settingsFrom(env));
    try {
      const { invite, token } = await store.users.invite(
        values.name,
        (values.role ?? "member") as "admin" | "member",
        null,
      );
      await store.users.audit.record({
        actorId: null,
        actor: "cli",
        address: null,
        action: "user.invite",
        target: invite.id,
        detail: { name: invite.name, role: invite.role, expires_at: invite.expiresAt },
      });
      process.stderr.write(
        `invited ${invite.name} as ${invite.role}; the link works once, until ${new Date(invite.expiresAt).toISOString()}${base ? "" : " (open it on this server's URL)"}:\n`,
      );
      process.stdout.write(`${inviteLink(base, token)}\n`);
      return 0;
    } catch (e) {
      if (!(e instanceof TypeError)) throw e;
      process.stderr.write(`scratchrun users invite: ${e.message}\n`);
      return 2;
    } finally {
      await store.close();
    }
  }
  if ((sub === "role" || sub === "reset" || sub === "remove") && values.name) {
    if (sub === "role" && !values.role) {
      process.stderr.write(USERS_USAGE);
      return 2;
    }
    const password = sub === "reset" ? (await readPassword()).replace(/\r?\n$/, "") : undefined;
    const store = await openStore(settingsFrom(env));
    try {
      const name = values.name;
      let target: string | undefined;
      let detail: Record<string, unknown>;
      if (sub === "role") {
        const u = await store.users.setRole(name, values.role as "admin" | "member");
        target = u?.id;
        detail = { name, role: values.role };
        if (u) process.stderr.write(`${u.name} is ${u.role} now\n`);
      } else if (sub === "reset") {
        const u = await store.users.resetPassword(name, password!);
        target = u?.id;
        detail = { name };
        if (u) process.stderr.write(`new password set for ${u.name}; signed out everywhere\n`);
      } else {
        const r = await store.users.remove(name);
        target = r?.user.id;
        detail = { name, revoked_keys: r?.revoked ?? [] };
        if (r)
          process.stderr.write(
            `removed ${r.user.name}; ${r.revoked.length} of their keys revoked\n`,
          );
      }
      if (target === undefined) {
        process.stderr.write(
          `scratchrun users ${sub}: no console user named ${JSON.stringify(name)}\n`,
        );
        return 1;
      }
      await store.users.audit.record({
        actorId: null,
        actor: "cli",
        address: null,
        action: `user.${sub}`,
        target,
        detail,
      });
      return 0;
    } catch (e) {
      if (!(e instanceof TypeError)) throw e;
      process.stderr.write(`scratchrun users ${sub}: ${e.message}\n`);
      return 2;
    } finally {
      await store.close();
    }
  }
  if (sub === "list") {
    const store = await openStore(settingsFrom(env));
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
