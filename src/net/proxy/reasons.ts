/**
 * Why the egress proxy refused a connection or a lookup: the result's `network_refused[].reason`
 * (the output schema and the proxy share this list; it imports nothing).
 */
export const REFUSAL_REASONS = [
  /** the name is not on the allowlist */
  "not_allowed",
  /** no name to check: a TLS hello without SNI, a request without Host (an IP address) */
  "no_name",
  /** the name given is an IP address (SNI or Host) */
  "ip_address",
  /** the name given is not a DNS host name */
  "bad_name",
  /** the TLS hello carries Encrypted Client Hello: its real name is hidden */
  "ech",
  /** HTTP: two Host headers, or a target naming another host than Host */
  "host_mismatch",
  /** not TLS on 443 / not HTTP/1 on 80, malformed, oversized, or nothing sent in time */
  "protocol",
  /** the name resolves only to blocked addresses (private, metadata, the host's network) */
  "blocked_address",
  /** the name does not resolve */
  "unresolved",
  /** no address of the name answered */
  "unreachable",
  /** the sandbox already holds its bound of connections through the proxy (admission.ts) */
  "connection_limit",
  /** the proxy holds its bound of connections from all sandboxes together */
  "proxy_busy",
  /** a request carries a brokered secret's placeholder to a host that secret is not bound to */
  "secret_placeholder",
  /**
   * a request carries the placeholder of a secret bound to its host over plain HTTP, where the
   * value would cross the network in cleartext (the operator's SCRATCHRUN_SECRETS_PLAIN_HTTP
   * does not name the host)
   */
  "secret_plain_http",
  /** a bound host's certificate is not trusted by the host (or does not name it) */
  "untrusted_upstream",
] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

/** One kind of refusal in a sandbox's report: the name (null: none was sent), port, count. */
export interface Refusal {
  host: string | null;
  port: number;
  reason: RefusalReason;
  count: number;
}
