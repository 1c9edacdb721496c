/* Running the user code: spawn, forward output under caps, enforce the timeout, kill the whole
 * tree, reap it. */
#ifndef AGENT_RUN_H
#define AGENT_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent-request.h"

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

/* What a code process is started with. extra[i] becomes the child's fd 3 + i. */
#define SPAWN_MAX_EXTRA 2
struct spawn_spec {
  char *const *argv;
  char *const *envp;
  const char *cwd;
  uint32_t uid, gid;
  int extra[SPAWN_MAX_EXTRA];
  int nextra;
};

/* A started code process: its pid and the read ends of its stdout and stderr pipes. */
struct code_proc {
  pid_t pid;
  int out_r, err_r;
};

/* Forks a child that alone drops to s->uid/gid, gets /dev/null and two fresh pipes as fds 0-2
 * and s->extra as fds 3.., changes to s->cwd and execs s->argv. Returns once execve succeeded
 * (0) or failed (-1, msg says at which stage). Blocks SIGCHLD in the agent. */
int spawn_code(const struct spawn_spec *s, struct code_proc *p, char *msg, size_t msglen);

/* Runs req's argv in a forked child that alone drops to req's uid/gid (the agent keeps its own
 * ids). Sends S once the code runs, O/E while it runs. host_in is polled for K and
 * EOF (EOF: kill tree and _exit). Returns once the tree is dead and the pipes are drained. */
void run_code(int host_in, int host_out, const struct request *req, struct run_result *res);

/* run_code for a process already started for req (the pre-started interpreter, just released):
 * sends S and supervises it the same way; the code's time counts from here. */
void run_started(int host_in, int host_out, const struct request *req, struct run_result *res,
                 const struct code_proc *p);

/* A session's interpreter: started at a session's first call as `argv[0] kernel` (the runtime's
 * guest/session.py or guest/session.js) and kept between calls, each of which it runs in itself
 * (its variables, imports and open figures stay). fd 3 brings it a cell, fd 4 takes its status. */
struct kernel {
  struct code_proc proc; /* proc.pid 0: none running */
  int ctl_w, note_r;
};

void kernel_init(struct kernel *k);

/* Runs req's code file in the session's kernel, starting one first (as req's user, with req's
 * environment and cwd) when none runs; *fresh is set when it had to. Sends S, O/E, as run_code.
 * A cell that ends with its note leaves the kernel and whatever the cell started running; one
 * that ends otherwise (the interpreter exited or crashed, the timeout, K, the output cap) kills
 * the whole tree, and the next call starts a fresh interpreter in the same files. */
void run_cell(int host_in, int host_out, const struct request *req, struct run_result *res,
              struct kernel *k, int *fresh);

#endif
