import { parseArgs } from "node:util";
import { hostCeiling } from "../policy/host.js";
import {
  describeKeyPolicy,
  patchFromFlags,
  POLICY_FLAGS,
  type KeyPolicy,
} from "../policy/key-policy.js";
import { RAISE_CEILINGS } from "../schema/limits.js";
import { RUNTIMES } from "../runtimes/names.js";
import { PRINCIPAL } from "../store/keys.js";
import { openStore } from "../store/open.js";
import { settingsFrom } from "../schema/settings/values.js";

export const KEYS_USAGE = `scratchrun keys create --name N [--owner USER] [--oidc-subject SUB]
                       [--expires 30d|12h|2027-01-31] [policy]
                                           create a key (--owner: the console user it belongs
                                           to; --oidc-subject: the trusted OIDC issuer's tokens
                                           for that subject act as it; --expires: after so many
                                           days or hours, or at a UTC date or time, it
                                           authenticates nowhere); printed once, on stdout
scratchrun keys update <id|name> [policy]  change a key's policy (its next request is held to it);
                                           uid:N is a local user of the local service (decision
                                           0018), made here if it has not called yet
scratchrun keys list [--json]              list keys and their policies (never the keys themselves)
scratchrun keys revoke <id|name>           revoke a key at once
create, update and revoke are written to the console's audit log (as "cli").

Policy (each optional; absent: the server's setting; "default" clears a field on update):
  --runtimes LIST          runtimes the key may use, comma-separated: ${RUNTIMES.join(",")}
  --network public|none    "none": the key's calls have no network
  --egress-allow LIST      with network public: the only domains its calls may reach
                           (example.com, *.example.com), comma-separated
  --max-timeout-ms N       longest timeout_ms (100 to ${RAISE_CEILINGS.timeoutMs}: up to 15 minutes)
  --max-memory-mb N        most memory_mb (32 up; a server caps it at half of its host's RAM)
  --concurrency N          calls in flight at once
  --rate N                 calls per minute
`;

/** --expires: "30d", "12h", or a date or time (UTC unless it names a zone); a TypeError else. */
export function parseExpiry(v: string, now = Date.now()): number {
  const rel = /^(\d{1,5})([dh])$/.exec(v);
  const at = rel
    ? now + Number(rel[1]) * (rel[2] === "d" ? 86_400_000 : 3_600_000)
    : /^\d{4}-\d\d-\d\d([T ][\d:.]+(Z|[+-]\d\d:\d\d)?)?$/.test(v)
      ? Date.parse(/[T ]/.test(v) && !/(Z|[+-]\d\d:\d\d)$/.test(v) ? `${v}Z` : v)
      : Number.NaN;
  if (!Number.isFinite(at) || at <= now)
    throw new TypeError(
      `--expires ${JSON.stringify(v)} must be a time ahead: 30d, 12h, or a date like 2027-01-31`,
    );
  return at;
}

const iso = (ms: number | null) => (ms === null ? "-" : new Date(ms).toISOString());

const policyOptions = Object.fromEntries(
  Object.values(POLICY_FLAGS).map((flag) => [flag, { type: "string" as const }]),
);

/** A note when a key's memory is more than a server on this host would give it. */
function hostNote(policy: KeyPolicy | null): string {
  const mb = policy?.max_memory_mb;
  const host = hostCeiling().memoryMb;
  return mb !== undefined && mb > host
    ? `note: a server on this host caps memory_mb at ${host} (half of its RAM); this key's calls get that\n`
    : "";
}

/**
 * `scratchrun keys …` on the database in SCRATCHRUN_HOME, or on the shared Postgres when
 * SCRATCHRUN_DATABASE_URL is set (works while servers run). A bad policy value exits 2 with the
 * field and its range, before anything is written.
 */
export async function runKeys(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  const [sub, ...rest] = argv;
  let values: Record<string, string | boolean | undefined>;
  let positionals: string[];
  let patch;
  try {
    ({ values, positionals } = parseArgs({
      args: rest,
      options: {
        name: { type: "string" },
        owner: { type: "string" },
        "oidc-subject": { type: "string" },
        expires: { type: "string" },
        json: { type: "boolean" },
        ...policyOptions,
      },
      allowPositionals: true,
      strict: true,
    }));
    const { expires: _expires, ...flags } = values;
    patch = patchFromFlags(flags as Record<string, string | undefined>);
  } catch (e) {
    process.stderr.write(`scratchrun keys: ${e instanceof Error ? e.message : String(e)}\n`);
    return 2;
  }
  const hasPolicy = Object.keys(patch).length > 0;
  if ((sub === "list" || sub === "revoke") && hasPolicy) {
    process.stderr.write(`scratchrun keys ${sub}: takes no policy flags\n\n${KEYS_USAGE}`);
    return 2;
  }
  let expiresAt: number | null = null;
  if (typeof values.expires === "string") {
    if (sub !== "create") {
      process.stderr.write(`scratchrun keys ${sub}: --expires is for create\n\n${KEYS_USAGE}`);
      return 2;
    }
    try {
      expiresAt = parseExpiry(values.expires);
    } catch (e) {
      process.stderr.write(`scratchrun keys create: ${(e as Error).message}\n`);
      return 2;
    }
  }
  const name = typeof values.name === "string" ? values.name : undefined;
  const store = await openStore(settingsFrom(env));
  /** What the CLI changed, in the console's audit log (as "cli": whoever runs it on the host). */
  const audit = (action: string, target: string, detail: Record<string, unknown>) =>
    store.users.audit.record({
      actorId: null,
      actor: "cli",
      address: null,
      action,
      target,
      detail,
    });
  try {
    const { keys } = store;
    switch (sub) {
      case "create": {
        if (!name) break;
        let ownerId: string | null = null;
        if (typeof values.owner === "string") {
          const owner = await store.users.byName(values.owner);
          if (!owner) {
            process.stderr.write(
              `scratchrun keys create: no console user named ${JSON.stringify(values.owner)} (scratchrun users create)\n`,
            );
            return 2;
          }
          ownerId = owner.id;
        }
        let created;
        try {
          const subject = values["oidc-subject"];
          created = await keys.create(
            name,
            hasPolicy ? patch : null,
            Date.now(),
            ownerId,
            typeof subject === "string" ? subject : null,
            expiresAt,
          );
        } catch (e) {
          if (!(e instanceof TypeError)) throw e;
          process.stderr.write(`scratchrun keys create: ${e.message}\n`);
          return 2;
        }
        await audit("key.create", created.id, {
          name,
          owner_id: ownerId,
          policy: created.policy,
          expires_at: created.expiresAt,
        });
        process.stderr.write(
          `created key ${created.id} (${name}; ${describeKeyPolicy(created.policy)}${created.expiresAt === null ? "" : `; expires ${iso(created.expiresAt)}`}); it is shown only now:\n${hostNote(created.policy)}`,
        );
        process.stdout.write(`${created.key}\n`);
        return 0;
      }
      case "update": {
        const target = positionals[0];
        if (!target || !hasPolicy) break;
        let updated;
        try {
          // A local user's principal exists from its first call; root may set its policy before.
          if (PRINCIPAL.test(target)) await keys.principal(target);
          updated = await keys.updatePolicy(target, patch);
        } catch (e) {
          if (!(e instanceof TypeError)) throw e;
          process.stderr.write(`scratchrun keys update: ${e.message}\n`);
          return 2;
        }
        if (!updated) {
          process.stderr.write(
            `scratchrun: no active key with id or name ${JSON.stringify(target)}\n`,
          );
          return 1;
        }
        await audit("key.policy", updated.id, { patch, policy: updated.policy });
        process.stderr.write(
          `updated key ${updated.id}: ${describeKeyPolicy(updated.policy)}\n${hostNote(updated.policy)}`,
        );
        return 0;
      }
      case "list": {
        const list = await keys.list();
        if (values.json) {
          process.stdout.write(`${JSON.stringify(list, null, 2)}\n`);
          return 0;
        }
        for (const k of list)
          process.stdout.write(
            `${k.id}  ${k.revokedAt === null ? "active " : "revoked"}  created ${iso(k.createdAt)}  last used ${iso(k.lastUsedAt)}  ${k.name}  [${describeKeyPolicy(k.policy)}]\n`,
          );
        return 0;
      }
      case "revoke": {
        const target = positionals[0];
        if (!target) break;
        const ids = await keys.revoke(target);
        if (ids.length === 0) {
          process.stderr.write(
            `scratchrun: no active key with id or name ${JSON.stringify(target)}\n`,
          );
          return 1;
        }
        for (const id of ids) await audit("key.revoke", id, { named: target });
        process.stderr.write(`revoked ${ids.join(", ")}\n`);
        return 0;
      }
    }
    process.stderr.write(KEYS_USAGE);
    return 2;
  } finally {
    await store.close();
  }
}
