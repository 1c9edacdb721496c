/**
 * Routes as data: every server's front door is one table of rows, each a method, a path and the
 * handler that answers it. A path is matched whole, segment by segment; `{name}` takes one
 * non-empty segment, handed to the handler as sent. A path that no row has is 404; a path some
 * row has, asked with a method none takes, is 405 naming the methods that are taken. Checks that
 * several rows share (a key, a console session, a worker's secret) wrap those rows' handlers, so
 * the table says which rows they guard.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { sendError } from "./respond.js";

export type Method = "GET" | "POST" | "PUT" | "DELETE" | "OPTIONS";

/** One request as a handler sees it. */
export interface Exchange {
  req: IncomingMessage;
  res: ServerResponse;
  /** The path's `{name}` segments, as sent (not decoded). */
  params: Readonly<Record<string, string>>;
  query: URLSearchParams;
}

export type Handler = (x: Exchange) => Promise<void> | void;

export interface Route {
  method: Method;
  path: string;
  handle: Handler;
  /** What the request is counted under in the metrics; the row's path unless given. */
  label?: string;
}

export type Match =
  | { kind: "route"; route: Route; params: Record<string, string> }
  | { kind: "method"; allow: Method[]; label: string }
  | { kind: "none" };

/** Which row answers `method` on `path` (pure): the first whose method and path both fit. */
export function matchRoute(routes: readonly Route[], method: string, path: string): Match {
  const segments = path.split("/");
  const allow: Method[] = [];
  let label: string | undefined;
  for (const route of routes) {
    const params = matchPath(route.path, segments);
    if (!params) continue;
    if (route.method === method) return { kind: "route", route, params };
    if (!allow.includes(route.method)) allow.push(route.method);
    label ??= route.label ?? route.path;
  }
  return label === undefined ? { kind: "none" } : { kind: "method", allow, label };
}

function matchPath(pattern: string, segments: readonly string[]): Record<string, string> | null {
  const parts = pattern.split("/");
  if (parts.length !== segments.length) return null;
  const params: Record<string, string> = {};
  for (const [i, part] of parts.entries()) {
    const segment = segments[i]!;
    if (part.startsWith("{") && part.endsWith("}")) {
      if (segment === "") return null;
      params[part.slice(1, -1)] = segment;
    } else if (part !== segment) return null;
  }
  return params;
}

/**
 * A server's front door over its table: answers each request by its row (404 and 405 itself)
 * and resolves with the label the request is counted under.
 */
export function router(routes: readonly Route[]) {
  return async (req: IncomingMessage, res: ServerResponse): Promise<string> => {
    const url = req.url ?? "/";
    const q = url.indexOf("?");
    const path = q < 0 ? url : url.slice(0, q);
    const method = req.method ?? "GET";
    const match = matchRoute(routes, method, path);
    if (match.kind === "none") {
      sendError(res, 404, "NOT_FOUND", `No route ${path}`);
      return "unknown";
    }
    if (match.kind === "method") {
      sendError(res, 405, "NOT_FOUND", `${method} is not allowed on ${path}`, {
        Allow: match.allow.join(", "),
      });
      return match.label;
    }
    const query = new URLSearchParams(q < 0 ? "" : url.slice(q + 1).split("#")[0]);
    await match.route.handle({ req, res, params: match.params, query });
    return match.route.label ?? match.route.path;
  };
}
