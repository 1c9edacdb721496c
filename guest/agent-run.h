/* Running the user code: spawn, forward output under caps, enforce the timeout, kill the whole
 * tree, reap it. */
#ifndef AGENT_RUN_H
#define AGENT_RUN_H

#include <stdint.h>

#include "agent-request.h"

enum exit_reason {
  R_EXITED = 0,
  R_SIGNALED = 1,
  R_TIMEOUT = 2,
  R_OUTPUT_LIMIT = 3,
  R_KILLED = 4,
  R_SPAWN_FAILED = 5,
  R_SETUP_FAILED = 6,
};

struct run_result {
  enum exit_reason reason;
  int32_t value;
  uint8_t stdout_truncated, stderr_truncated;
  uint32_t duration_ms;
  char message[256];
};

/* Kills every process this agent may signal except itself (and the pid namespace's init):
 * kill(-1, SIGKILL). Only safe inside a pid namespace or on the sandbox's own kernel; main()
 * checks that before reading a request. */
void kill_tree(void);
/* kill_tree, then reap until no child is left (the agent is a child subreaper, so orphans of
 * the code come back to it). */
void kill_and_reap(void);

/* Runs req's argv in a forked child that alone drops to req's uid/gid (the agent keeps its own
 * ids). Sends S once the code runs, O/E while it runs. host_in is polled for K and
 * EOF (EOF: kill tree and _exit). Returns once the tree is dead and the pipes are drained. */
void run_code(int host_in, int host_out, const struct request *req, struct run_result *res);

#endif
