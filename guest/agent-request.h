/* The Q frame: parsing into NUL-terminated strings and validation. */
#ifndef AGENT_REQUEST_H
#define AGENT_REQUEST_H

#include <stddef.h>
#include <stdint.h>

/* KEEP_ID: generated (src/protocol/guest-header.ts). */
#include "scratchrun-shared.h"

struct req_file {
  char *path;
  uint32_t mode;
  const uint8_t *data; /* points into the request payload */
  uint32_t len;
};

/* The session flag's bits. */
#define SESSION_CALL 1u
#define SESSION_ADOPT 2u

struct request {
  uint32_t version;
  uint32_t timeout_ms;
  uint64_t max_stdout, max_stderr, max_file, max_total;
  uint32_t uid, gid;
  char *cwd;
  uint32_t argc;
  char **argv; /* NULL-terminated */
  uint32_t envc;
  char **envp; /* NULL-terminated */
  uint32_t filec;
  struct req_file *files;
  uint32_t retc;
  char **rets;
  /* A session's call (SESSION_CALL): after D the agent reads the next Q instead of exiting. With
   * SESSION_ADOPT too, a session that has no kernel yet may make the pre-started interpreter its
   * kernel (the host says when: docs/decisions/0013-sessions.md). */
  uint32_t session;
  /* With a session: the script that keeps the interpreter between calls (kernel argv: argv[0]
   * kernel), or "" for code run as its own process each call. */
  char *kernel;
  /* The host's wall clock, ms since the epoch (0: leave the clock): set before the call by an
   * agent on a kernel of its own (a session's VM stood still while it was paused). */
  uint64_t clock_ms;
};

/* Parses and validates a Q payload. On failure returns -1 and writes a reason to err.
 * Allocations are bounded by a small multiple of len (counts are checked against the bytes left
 * before anything is allocated). The request keeps pointers into payload. */
int parse_request(const uint8_t *payload, size_t len, struct request *req, char *err,
                  size_t errlen);

/* Frees what parse_request allocated (a session's agent parses many requests). */
void free_request(struct request *req);

/* 1 when p (len bytes, no terminator needed) is absolute, at most MAX_PATH_BYTES, has no NUL,
 * no empty, "." or ".." component, and names something below "/" (not "/" itself). */
int valid_abs_path(const char *p, size_t len);

#endif
