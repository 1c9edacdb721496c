import { isIP } from "node:net";
import { promises as dns } from "node:dns";

/**
 * Finding workers: `--workers NAME:PORT[,NAME:PORT...]`. A NAME that is a DNS name is resolved on
 * every round (a headless Service's name resolves to one address per ready worker pod); an IP
 * literal is used as it is. SCRATCHRUN_WORKERS_DNS_SERVER (host:port) sends the lookups to that
 * server instead of the system resolver (tests run their own).
 */
export interface WorkerSource {
  host: string;
  port: number;
}

/** Pure: the sources of a --workers value, or an error naming the bad part. */
export function parseWorkersSpec(spec: string): WorkerSource[] {
  const out: WorkerSource[] = [];
  for (const part of spec.split(",").map((p) => p.trim())) {
    const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$/.exec(part);
    const port = Number(m?.[2]);
    if (!m || port < 1 || port > 65535)
      throw new Error(
        `--workers ${JSON.stringify(part)} is not NAME:PORT (e.g. scratchrun-workers.scratchrun.svc.cluster.local:8788)`,
      );
    out.push({ host: m[1]!.replace(/^\[|\]$/g, ""), port });
  }
  return out;
}

const addr = (host: string, port: number) =>
  isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`;

const NO_ANSWER = new Set(["ENOTFOUND", "ENODATA", "NXDOMAIN"]);

/** Finds the workers `spec` names, asking `dnsServer` (SCRATCHRUN_WORKERS_DNS_SERVER) or the system's resolver. */
export function discovery(spec: string, dnsServer: string | null = null) {
  const sources = parseWorkersSpec(spec);
  const resolver = dnsServer ? new dns.Resolver({ timeout: 1000, tries: 2 }) : null;
  resolver?.setServers([dnsServer!]);
  const resolve = async (host: string): Promise<string[]> => {
    if (isIP(host)) return [host];
    try {
      if (resolver) {
        const [v4, v6] = await Promise.all([
          resolver.resolve4(host).catch(orEmpty),
          resolver.resolve6(host).catch(orEmpty),
        ]);
        return [...v4, ...v6];
      }
      return (await dns.lookup(host, { all: true })).map((a) => a.address);
    } catch (e) {
      return orEmpty(e);
    }
  };
  return async (): Promise<string[]> => {
    const found = await Promise.all(
      sources.map(async (s) => (await resolve(s.host)).map((h) => addr(h, s.port))),
    );
    return [...new Set(found.flat())].sort();
  };
}

/** No such name or no records: no ready workers (an empty headless Service), not a failure. */
function orEmpty(e: unknown): string[] {
  if (NO_ANSWER.has((e as { code?: string }).code ?? "")) return [];
  throw e;
}
