/**
 * What the server and its egress proxy child say to each other: one JSON object per line, the
 * server's requests on the child's stdin (each answered once, by `seq`, on its stdout).
 */
import type { Cidr } from "../addresses.js";
import type { Refusal } from "./decide.js";
import type { ProxyPorts } from "../nftables-proxy.js";
import type { ReadWork } from "./client-hello.js";

/** The child's command line argument (JSON). */
export interface ProxyChildConfig {
  /** Host uid and gid the child drops to once it listens. */
  uid: number;
  gid: number;
  /** Resolvers the proxy asks (the uplink's). */
  resolvers: string[];
  /** Ports to listen on: 0 picks free ones (a restarted child asks for the ones it had). */
  ports: ProxyPorts | null;
  /**
   * A PEM file of CA certificates trusted besides the host's (/etc/ssl/certs) when the proxy
   * verifies a bound host's certificate (SCRATCHRUN_EGRESS_UPSTREAM_CA; test topologies).
   */
  upstreamCaFile?: string | null;
  /**
   * Allowlist entries (normalised) of the hosts whose brokered secrets are written into plain-HTTP
   * requests too (SCRATCHRUN_SECRETS_PLAIN_HTTP); elsewhere only inside TLS the proxy terminates.
   */
  secretsPlainHttp?: string[];
}

/**
 * The first-bytes readers' work over all connections (streams.ts): bytes received before a
 * verdict, and bytes the readers looked at (ReadWork); the second stays within a small multiple
 * of the first however the bytes are cut (SEC-PROXY-TRICKLE).
 */
export interface FirstBytesWork extends ReadWork {
  received: number;
}

/** One brokered secret as the proxy holds it: its placeholder, value and bound hosts. */
export interface BrokeredSecret {
  name: string;
  placeholder: string;
  value: string;
  /** Normalised allowlist entries (names and `*.` wildcards). */
  hosts: string[];
}

/** A call's brokered secrets and its CA (docs/decisions/0015-brokered-secrets.md). */
export interface BrokerSpec {
  secrets: BrokeredSecret[];
  caCertPem: string;
  /** The CA's private key (PKCS#8 PEM): host and proxy only, forgotten with the assignment. */
  caKeyPem: string;
}

export type ProxyRequest =
  | { seq: number; op: "assign"; addrs: string[]; allow: string[]; broker?: BrokerSpec }
  | { seq: number; op: "release"; addrs: string[] }
  | { seq: number; op: "collect"; addrs: string[] }
  /** The first-bytes readers' work so far (streams.ts): tests bound it by the bytes received. */
  | { seq: number; op: "work" }
  | { seq: number; op: "host"; addresses: string[]; networks: Cidr[] };

export type ProxyReply =
  | { ready: ProxyPorts }
  | { seq: number; ok: true; refused?: Refusal[]; dropped?: number; work?: FirstBytesWork }
  | { seq: number; ok: false; error: string };
