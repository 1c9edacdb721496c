import { createServer, request, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A loopback front door that adds an API key to every request and passes everything else
 * through unchanged, streams included: for clients that cannot send a header of their own (the
 * conformance suite). The Host and Origin of a request addressed to the door are rewritten to
 * the service's own port, so the service's loopback check sees what a direct client would send;
 * any other Host or Origin (a DNS-rebinding probe) reaches the service as it came.
 */
export interface KeyDoor {
  url: string;
  close(): Promise<void>;
}

export async function startKeyDoor(target: string, key: string): Promise<KeyDoor> {
  const to = new URL(target);
  let door = "";
  const server: Server = createServer((req, res) => {
    const headers: IncomingHttpHeaders = { ...req.headers, authorization: `Bearer ${key}` };
    for (const name of ["host", "origin"] as const) {
      const v = headers[name];
      if (typeof v === "string") headers[name] = v.split(door).join(to.host);
    }
    const up = request(
      { host: to.hostname, port: to.port, method: req.method, path: req.url, headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    up.on("error", () => res.destroy());
    res.on("close", () => {
      if (!res.writableFinished) up.destroy();
    });
    req.pipe(up);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  door = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: `http://${door}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
