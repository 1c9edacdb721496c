/* The Q frame: parsing into NUL-terminated strings and validation. */
#include "agent-request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent-wire.h"

int valid_abs_path(const char *p, size_t len) {
  if (len < 2 || len > MAX_PATH_BYTES || p[0] != '/') return 0;
  if (memchr(p, '\0', len) != NULL) return 0;
  size_t start = 1;
  for (size_t i = 1; i <= len; i++) {
    if (i == len || p[i] == '/') {
      size_t clen = i - start;
      if (clen == 0) return 0;
      if (clen == 1 && p[start] == '.') return 0;
      if (clen == 2 && p[start] == '.' && p[start + 1] == '.') return 0;
      start = i + 1;
    }
  }
  return 1;
}

/* Copies a length-prefixed string out of the payload as a C string; rejects embedded NUL. */
static char *take_str(struct cursor *c) {
  const uint8_t *b;
  uint32_t n;
  if (cur_bytes(c, &b, &n) < 0) return NULL;
  if (memchr(b, '\0', n) != NULL) return NULL;
  char *s = malloc((size_t)n + 1);
  if (!s) return NULL;
  memcpy(s, b, n);
  s[n] = '\0';
  return s;
}

/* Allocates a NULL-terminated array for count strings, each needing >= 4 payload bytes. */
static char **take_str_array(struct cursor *c, uint32_t *count, const char *what, char *err,
                             size_t errlen) {
  if (cur_u32(c, count) < 0 || *count > cur_left(c) / 4) {
    snprintf(err, errlen, "request: bad %s count", what);
    return NULL;
  }
  char **arr = calloc((size_t)*count + 1, sizeof *arr);
  if (!arr) {
    snprintf(err, errlen, "request: out of memory");
    return NULL;
  }
  for (uint32_t i = 0; i < *count; i++) {
    arr[i] = take_str(c);
    if (!arr[i]) {
      snprintf(err, errlen, "request: %s[%u] is truncated or contains NUL", what, i);
      return NULL;
    }
  }
  return arr;
}

#define FAIL(...)                          \
  do {                                     \
    snprintf(err, errlen, __VA_ARGS__);    \
    return -1;                             \
  } while (0)

int parse_request(const uint8_t *payload, size_t len, struct request *req, char *err,
                  size_t errlen) {
  struct cursor c = {payload, len, 0};
  memset(req, 0, sizeof *req);
  if (cur_u32(&c, &req->version) < 0) FAIL("request: truncated header");
  if (req->version != PROTOCOL_VERSION)
    FAIL("request: protocol version %u, agent speaks %u", req->version, PROTOCOL_VERSION);
  if (cur_u32(&c, &req->timeout_ms) < 0 || cur_u64(&c, &req->max_stdout) < 0 ||
      cur_u64(&c, &req->max_stderr) < 0 || cur_u64(&c, &req->max_file) < 0 ||
      cur_u64(&c, &req->max_total) < 0 || cur_u32(&c, &req->uid) < 0 ||
      cur_u32(&c, &req->gid) < 0)
    FAIL("request: truncated header");
  if (req->timeout_ms == 0) FAIL("request: timeout_ms must be at least 1");
  if (req->max_file > MAX_FILE_CONTENT)
    FAIL("request: max_file_bytes %llu exceeds %u", (unsigned long long)req->max_file,
         MAX_FILE_CONTENT);
  if ((req->uid == KEEP_ID) != (req->gid == KEEP_ID))
    FAIL("request: uid and gid must both be set or both be 0xFFFFFFFF");

  req->cwd = take_str(&c);
  if (!req->cwd) FAIL("request: cwd is truncated or contains NUL");
  if (strcmp(req->cwd, "/") != 0 && !valid_abs_path(req->cwd, strlen(req->cwd)))
    FAIL("request: cwd is not a normalised absolute path");

  req->argv = take_str_array(&c, &req->argc, "argv", err, errlen);
  if (!req->argv) return -1;
  if (req->argc == 0) FAIL("request: argv is empty");
  if (!valid_abs_path(req->argv[0], strlen(req->argv[0])))
    FAIL("request: argv[0] is not a normalised absolute path");

  req->envp = take_str_array(&c, &req->envc, "env", err, errlen);
  if (!req->envp) return -1;
  for (uint32_t i = 0; i < req->envc; i++) {
    const char *eq = strchr(req->envp[i], '=');
    if (!eq || eq == req->envp[i]) FAIL("request: env[%u] is not NAME=value", i);
  }

  if (cur_u32(&c, &req->filec) < 0 || req->filec > cur_left(&c) / 12)
    FAIL("request: bad file count");
  req->files = calloc((size_t)req->filec + 1, sizeof *req->files);
  if (!req->files) FAIL("request: out of memory");
  for (uint32_t i = 0; i < req->filec; i++) {
    struct req_file *f = &req->files[i];
    f->path = take_str(&c);
    if (!f->path) FAIL("request: files[%u].path is truncated or contains NUL", i);
    if (!valid_abs_path(f->path, strlen(f->path)))
      FAIL("request: files[%u].path is not a normalised absolute path", i);
    if (cur_u32(&c, &f->mode) < 0) FAIL("request: files[%u] is truncated", i);
    if (f->mode & ~0777u) FAIL("request: files[%u].mode %o has bits beyond 0777", i, f->mode);
    if (cur_bytes(&c, &f->data, &f->len) < 0) FAIL("request: files[%u] is truncated", i);
  }

  req->rets = take_str_array(&c, &req->retc, "return_files", err, errlen);
  if (!req->rets) return -1;
  for (uint32_t i = 0; i < req->retc; i++)
    if (!valid_abs_path(req->rets[i], strlen(req->rets[i])))
      FAIL("request: return_files[%u] is not a normalised absolute path", i);

  if (cur_u32(&c, &req->session) < 0 || (req->session & ~(SESSION_CALL | SESSION_ADOPT)) ||
      req->session == SESSION_ADOPT)
    FAIL("request: bad session flag");
  req->kernel = take_str(&c);
  if (!req->kernel) FAIL("request: kernel is truncated or contains NUL");
  if (req->kernel[0] && (!req->session || !valid_abs_path(req->kernel, strlen(req->kernel))))
    FAIL("request: kernel must be an absolute path, and only with a session");
  if (cur_u64(&c, &req->clock_ms) < 0) FAIL("request: clock is truncated");

  if (cur_left(&c) != 0) FAIL("request: %zu trailing bytes", cur_left(&c));
  return 0;
}

static void free_strs(char **a, uint32_t n) {
  if (!a) return;
  for (uint32_t i = 0; i < n; i++) free(a[i]);
  free(a);
}

void free_request(struct request *req) {
  free(req->cwd);
  free_strs(req->argv, req->argc);
  free_strs(req->envp, req->envc);
  if (req->files)
    for (uint32_t i = 0; i < req->filec; i++) free(req->files[i].path);
  free(req->files);
  free_strs(req->rets, req->retc);
  free(req->kernel);
  memset(req, 0, sizeof *req);
}
