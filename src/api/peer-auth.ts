import type { IncomingMessage, ServerResponse } from "node:http";
import { peerOf } from "../http/peer-cred.js";
import { sendError } from "../http/respond.js";
import type { KeyStore, VerifiedKey } from "../store/keys.js";

/** The principal a local user is in the key store: `uid:N` (decision 0018). */
export const principalOf = (uid: number): string => `uid:${uid}`;

/**
 * Who is calling on the local socket: the uid the kernel recorded when the client connected
 * (SO_PEERCRED), as its principal `uid:N` in the key store, made the first time it calls with the
 * server's policy (root may give it its own: `scratchrun keys update uid:N …`). Nothing the
 * request carries is read: an Authorization header, a key or a claimed uid changes nothing.
 * Resolves with the key, or null once the request is answered: 401 when the connection has no
 * credentials (gone, or not a unix socket), 403 when root revoked the principal.
 */
export function peerAuth(keys: KeyStore, admissionTouchesKey = false) {
  return async (req: IncomingMessage, res: ServerResponse): Promise<VerifiedKey | null> => {
    let uid: number;
    try {
      uid = peerOf(req.socket).uid;
    } catch (e) {
      sendError(
        res,
        401,
        "UNAUTHORIZED",
        `the connection's peer credentials cannot be read (${e instanceof Error ? e.message : String(e)})`,
      );
      return null;
    }
    const name = principalOf(uid);
    const key = await keys.principal(name);
    if (!key) {
      sendError(
        res,
        403,
        "FORBIDDEN",
        `${name} is revoked on this service: ask root (scratchrun keys list shows it)`,
      );
      return null;
    }
    if (!admissionTouchesKey) keys.touch(key.id).catch(() => {});
    return key;
  };
}
