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

export const KEYS_USAGE = `scratchrun keys create --name N [--owner USER] [--oidc-subject SUB] [policy]
                                           create a key (--owner: the console user it belongs
                                           to; --oidc-subject: the trusted OIDC issuer's tokens
                                           for that subject act as it); printed once, on stdout
scratchrun keys update <id|name> [policy]  change a key's policy (its next request is held to it);
                                           uid:N is a local user of the local service (decision
                                           0018), made here if it has not called yet
scratchrun keys list [--json]              list keys and their policies (never the keys themselves)
scratchrun keys revoke <id|name>           revoke a key at once

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
        json: { type: "boolean" },
        ...policyOptions,
      },
      allowPositionals: true,
      strict: true,
    }));
    patch = patchFromFlags(values as Record<string, string | undefined>);
  } catch (e) {
    process.stderr.write(`scratchrun keys: ${e instanceof Error ? e.message : String(e)}\n`);
    return 2;
  }
  const hasPolicy = Object.keys(patch).length > 0;
  if ((sub === "list" || sub === "revoke") && hasPolicy) {
    process.stderr.write(`scratchrun keys ${sub}: takes no policy flags\n\n${KEYS_USAGE}`);
    return 2;
  }
  const name = typeof values.name === "string" ? values.name : undefined;
  const store = await openStore(env);
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
          );
        } catch (e) {
          if (!(e instanceof TypeError)) throw e;
          process.stderr.write(`scratchrun keys create: ${e.message}\n`);
          return 2;
        }
        process.stderr.write(
          `created key ${created.id} (${name}; ${describeKeyPolicy(created.policy)}); it is shown only now:\n${hostNote(created.policy)}`,
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
