/**
 * A call's brokered secrets (docs/decisions/0015-brokered-secrets.md), host side: the rule that
 * ties them to the network (checked before any sandbox starts), and what the call gets for them:
 * a placeholder per secret in the code's environment, the call's own CA trusted by the sandbox's
 * TLS clients, and the spec the egress proxy substitutes from. The values and the CA's key go to
 * the proxy only.
 */
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { ScratchRunError } from "../errors.js";
import {
  allowlistOf,
  intersectAllowlists,
  parseAllowlistEntry,
  type DomainAllowlist,
} from "../net/allowlist.js";
import type { BrokerSpec } from "../net/proxy/control.js";
import { newCallCa } from "../net/proxy/x509.js";
import type { AgentFile, AgentRequest } from "../protocol/types.js";
import { CA_BUNDLE_ENV, CA_BUNDLE_PATH, type ExecRequest } from "../schema/exec.js";

export { CA_BUNDLE_ENV, CA_BUNDLE_PATH };
/** A placeholder: this prefix and 256 random bits in hex (unguessable, URL- and header-safe). */
export const PLACEHOLDER_PREFIX = "scratchrun-secret-";
const SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";

const invalid = (message: string, fix: string) =>
  new ScratchRunError("INVALID_INPUT", `Invalid request: ${message}`, { fix });

/**
 * The checks on a call's secrets that need the server and its key (the parse applied those that
 * need only the request: src/schema/exec.ts): this server gives network "public", and the call's
 * allowlist allows every host a secret is bound to. Returns the allowlist the call
 * runs with: `allow` (the server's narrowed by the key's), or, where no allowlist applies, the
 * secrets' hosts alone. Throws INVALID_INPUT, saying the rule.
 */
export function secretsAllowlist(
  req: ExecRequest,
  networkHere: "none" | "public",
  allow: DomainAllowlist | null,
): DomainAllowlist {
  const secrets = Object.entries(req.secrets);
  if (networkHere !== "public")
    throw invalid(
      "secrets: this server gives calls no network, and secrets need it",
      "ask the operator for network public",
    );
  const hosts = [...new Set(secrets.flatMap(([, s]) => s.hosts.map(parseAllowlistEntry)))];
  if (!allow) return allowlistOf(hosts);
  for (const [name, s] of secrets)
    for (const h of s.hosts.map(parseAllowlistEntry)) {
      // h is allowed when the allowlist keeps it whole: the exact name, or the wildcard itself.
      if (!intersectAllowlists(allow, allowlistOf([h])).entries.includes(h))
        throw invalid(
          `secret ${name}: host ${h} is not on this call's egress allowlist (${allow.entries.join(", ")})`,
          "bind the secret to hosts the allowlist allows",
        );
    }
  return allow;
}

let systemBundle: string | null = null;
function hostRoots(): string {
  systemBundle ??= existsSync(SYSTEM_BUNDLE) ? readFileSync(SYSTEM_BUNDLE, "utf8") : "";
  return systemBundle;
}

export interface CallSecrets {
  /** For the egress proxy: placeholders, values, hosts, the CA and its key. */
  broker: BrokerSpec;
  /** NAME → placeholder, and the CA bundle variables. */
  env: Record<string, string>;
  /** The CA bundle. */
  files: AgentFile[];
}

/** Fresh placeholders and a fresh CA for one call's secrets. */
export function brokerSecrets(secrets: ExecRequest["secrets"]): CallSecrets {
  const ca = newCallCa();
  const broker: BrokerSpec = {
    caCertPem: ca.certPem,
    caKeyPem: ca.keyPem,
    secrets: Object.entries(secrets).map(([name, s]) => ({
      name,
      placeholder: `${PLACEHOLDER_PREFIX}${randomBytes(32).toString("hex")}`,
      value: s.value,
      hosts: [...new Set(s.hosts.map(parseAllowlistEntry))],
    })),
  };
  const env: Record<string, string> = {};
  for (const s of broker.secrets) env[s.name] = s.placeholder;
  for (const v of CA_BUNDLE_ENV) env[v] = CA_BUNDLE_PATH;
  const roots = hostRoots();
  const bundle = `${roots}${roots.endsWith("\n") || roots === "" ? "" : "\n"}${ca.certPem}`;
  return {
    broker,
    env,
    files: [{ path: CA_BUNDLE_PATH, mode: 0o444, content: Buffer.from(bundle, "utf8") }],
  };
}

/** The agent request with the call's placeholders and CA bundle. */
export function withSecrets(request: AgentRequest, s: CallSecrets): AgentRequest {
  return { ...request, env: { ...request.env, ...s.env }, files: [...request.files, ...s.files] };
}

/** What output redaction hides for a call: its env values, and always its secrets' values. */
export function redactionMap(req: ExecRequest): Record<string, string> {
  const map: Record<string, string> = req.redact_env ? { ...req.env } : {};
  for (const [name, s] of Object.entries(req.secrets ?? {})) map[name] = s.value;
  return map;
}
