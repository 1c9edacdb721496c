import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";

/** A PEP 503 "simple" index on 127.0.0.1 serving the wheels of a directory, as a mirror would. */
export interface LocalIndex {
  url: string;
  /** Paths requested, in order (to prove pip used this index). */
  requests: string[];
  close(): Promise<void>;
}

/** PEP 503 name normalisation. */
export function normalize(name: string): string {
  return name.toLowerCase().replace(/[-_.]+/g, "-");
}

export function sha256File(path: string): string {
  return createHash("sha256").update(readFileSync(path)).digest("hex");
}

export async function serveIndex(wheelDir: string): Promise<LocalIndex> {
  const requests: string[] = [];
  const projects = new Map<string, string[]>();
  for (const file of readdirSync(wheelDir).filter((f) => f.endsWith(".whl"))) {
    const project = normalize(file.split("-")[0]!);
    projects.set(project, [...(projects.get(project) ?? []), file]);
  }
  const html = (res: import("node:http").ServerResponse, body: string) => {
    res.setHeader("Content-Type", "text/html; charset=utf-8");
    res.end(page(body));
  };
  const page = (body: string) =>
    `<!DOCTYPE html><html><head><meta name="pypi:repository-version" content="1.0"></head><body>${body}</body></html>`;
  const server: Server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    requests.push(path);
    const project = /^\/simple\/([^/]+)\/$/.exec(path)?.[1];
    if (path === "/simple/") {
      html(res, [...projects.keys()].map((p) => `<a href="${p}/">${p}</a>`).join("\n"));
    } else if (project !== undefined && projects.has(normalize(project))) {
      const files = projects.get(normalize(project))!;
      html(
        res,
        files
          .map((f) => `<a href="../../files/${f}#sha256=${sha256File(join(wheelDir, f))}">${f}</a>`)
          .join("\n"),
      );
    } else if (path.startsWith("/files/") && readdirSync(wheelDir).includes(path.slice(7))) {
      res.setHeader("Content-Type", "application/octet-stream");
      res.end(readFileSync(join(wheelDir, path.slice(7))));
    } else {
      res.statusCode = 404;
      res.end("not found");
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/simple/`,
    requests,
    close: () => new Promise((r) => server.close(() => r())),
  };
}
