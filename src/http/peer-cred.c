/* scratchrun-peercred.node: who is at the other end of a unix socket, as the kernel says.
 *
 * The local service (docs/decisions/0018-local-service.md) answers every user of the machine on
 * one unix socket and takes the caller to be the uid the kernel recorded when the client called
 * connect(): SO_PEERCRED. Node has no way to read it, so this addon does, given the accepted
 * socket's file descriptor; nothing the client sends (headers, a key, a claimed uid) is read.
 *
 * peerCredentials(fd) returns [pid, uid, gid], or throws when fd is not a connected unix stream
 * socket (a TCP socket has no peer credentials; SO_PEERCRED there would say uid -1, and a caller
 * must never be read from it). Built by scripts/build-guest.mjs at setup, like the guest's reseed
 * addon: Node-API declared here, resolved in the node binary that loads it (-z now). */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Node-API (js_native_api.h), the calls used here. */
typedef struct napi_env__ *napi_env;
typedef struct napi_value__ *napi_value;
typedef struct napi_callback_info__ *napi_callback_info;
typedef napi_value (*napi_callback)(napi_env, napi_callback_info);
int napi_create_function(napi_env, const char *, size_t, napi_callback, void *, napi_value *);
int napi_set_named_property(napi_env, napi_value, const char *, napi_value);
int napi_get_cb_info(napi_env, napi_callback_info, size_t *, napi_value *, napi_value *, void **);
int napi_get_value_int32(napi_env, napi_value, int32_t *);
int napi_create_uint32(napi_env, uint32_t, napi_value *);
int napi_create_int32(napi_env, int32_t, napi_value *);
int napi_create_array_with_length(napi_env, size_t, napi_value *);
int napi_set_element(napi_env, napi_value, uint32_t, napi_value);
int napi_throw_error(napi_env, const char *, const char *);

static napi_value fail(napi_env env, const char *message) {
  napi_throw_error(env, NULL, message);
  return NULL;
}

static napi_value peer_credentials(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != 0 || argc != 1 ||
      napi_get_value_int32(env, argv[0], &fd) != 0 || fd < 0)
    return fail(env, "peerCredentials: takes one file descriptor");

  int domain = 0, type = 0;
  socklen_t len = sizeof domain;
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX)
    return fail(env, "peerCredentials: not a unix socket");
  len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
    return fail(env, "peerCredentials: not a stream socket");

  struct ucred cred;
  len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred)
    return fail(env, "peerCredentials: the kernel gave no peer credentials");
  /* An unconnected socket reports pid 0 and the overflow ids: no peer, no caller. */
  if (cred.pid <= 0 || cred.uid == (uid_t)-1)
    return fail(env, "peerCredentials: no connected peer");

  napi_value out, pid, uid, gid;
  if (napi_create_array_with_length(env, 3, &out) != 0 ||
      napi_create_int32(env, cred.pid, &pid) != 0 ||
      napi_create_uint32(env, cred.uid, &uid) != 0 ||
      napi_create_uint32(env, cred.gid, &gid) != 0 || napi_set_element(env, out, 0, pid) != 0 ||
      napi_set_element(env, out, 1, uid) != 0 || napi_set_element(env, out, 2, gid) != 0)
    return fail(env, "peerCredentials: out of memory");
  return out;
}

napi_value napi_register_module_v1(napi_env env, napi_value exports);
napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  napi_value fn;
  if (napi_create_function(env, "peerCredentials", 15, peer_credentials, NULL, &fn) != 0 ||
      napi_set_named_property(env, exports, "peerCredentials", fn) != 0)
    return NULL;
  return exports;
}
