import { sendError, sendJson } from "../http/respond.js";
import type { Route } from "../http/router.js";
import { consentRoutes } from "./consent.js";
import {
  consoleContext,
  noKey,
  readObject,
  visibleKeys,
  type ConsoleContext,
  type ConsoleDeps,
} from "./context.js";
import { VERSION } from "../version.js";
import { favicon } from "./favicon.js";
import { historyRoutes } from "./history.js";
import { keyRoutes } from "./keys.js";
import { oidcSigninRoutes } from "./oidc-signin.js";
import { peopleRoutes } from "./people.js";
import { STYLE, STYLE_PATH } from "./pages.js";
import { signinRoutes } from "./signin.js";
import { APP_PATH, serveStatic, STATIC_PATHS } from "./static.js";
import { userRoutes } from "./users.js";

export type { ConsoleDeps };

/**
 * The console's routes, a page at a time: the one page and its files, sign-in (a password, or the
 * trusted issuer) and sign-out, the OAuth consent page, then the JSON routes behind the page's
 * views (keys and grants, runs and usage, the playground, health), each on the session cookie
 * and, for a write, its CSRF token (openapi.json documents them all).
 */
export function consoleRoutes(d: ConsoleDeps): Route[] {
  const c = consoleContext(d);
  return [
    ...appRoutes(c),
    ...signinRoutes(c),
    ...(d.oidc?.signsIn ? oidcSigninRoutes(c, d.oidc) : []),
    ...consentRoutes(c),
    ...keyRoutes(c),
    ...userRoutes(c),
    ...peopleRoutes(c),
    ...historyRoutes(c),
    ...playgroundRoutes(c),
    {
      method: "GET",
      path: "/v1/console/health",
      handle: c.signedIn(({ res }) => sendJson(res, 200, d.health())),
    },
  ];
}

/**
 * The page itself (signed in; else the sign-in page), its files and the pages' stylesheet; the
 * server's root, which sends a browser (one that asks for HTML) to the console and tells any other
 * client where things are, in JSON; and the site's icon.
 */
function appRoutes(c: ConsoleContext): Route[] {
  const app: Route["handle"] = async ({ req, res }) => {
    if (await c.sessionOf(req)) serveStatic(res, APP_PATH);
    else c.seeOther(res, "/console/signin");
  };
  return [
    {
      method: "GET",
      path: "/",
      handle: ({ req, res }) => {
        if (/\btext\/html\b/.test(req.headers.accept ?? "")) return c.seeOther(res, "/console");
        sendJson(res, 200, {
          service: "scratchrun",
          version: VERSION,
          console: `${c.d.config.issuer}/console`,
          mcp: c.d.config.resource,
          openapi: `${c.d.config.issuer}/openapi.json`,
        });
      },
    },
    {
      method: "GET",
      path: "/favicon.ico",
      handle: ({ res }) => {
        const body = favicon();
        res.writeHead(200, {
          "Content-Type": "image/x-icon",
          "Content-Length": String(body.length),
          "Cache-Control": "max-age=86400",
          "X-Content-Type-Options": "nosniff",
        });
        res.end(body);
      },
    },
    { method: "GET", path: "/console", handle: app },
    { method: "GET", path: "/console/", label: "/console", handle: app },
    ...STATIC_PATHS.map((path): Route => ({
      method: "GET",
      path,
      handle: ({ res }) => void serveStatic(res, path),
    })),
    {
      method: "GET",
      path: STYLE_PATH,
      handle: ({ res }) => {
        res.writeHead(200, {
          "Content-Type": "text/css; charset=utf-8",
          "Cache-Control": "max-age=3600",
          "X-Content-Type-Options": "nosniff",
        });
        res.end(STYLE);
      },
    },
  ];
}

/** The playground: a run as one of the person's keys, answered as /v1/exec answers it. */
function playgroundRoutes(c: ConsoleContext): Route[] {
  return [
    {
      method: "POST",
      path: "/v1/console/exec",
      handle: c.signedIn(async (x, s) => {
        const b = await readObject(x, c.d.bodyCapBytes);
        if (!b) return;
        const { key_id: keyId, ...request } = b;
        if (typeof keyId !== "string")
          return sendError(
            x.res,
            400,
            "INVALID_INPUT",
            "key_id names the key to run as (one of yours)",
          );
        if (!(await visibleKeys(c.d.keys, s)).some((k) => k.id === keyId)) return noKey(x.res);
        await c.d.execAs(x.res, keyId, request);
      }),
    },
  ];
}
