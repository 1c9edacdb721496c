/* The pre-started interpreter of a microVM snapshot template (docs/decisions/0003-microvm.md):
 * started before the snapshot as the code's user with the base environment, blocked in
 * guest/prestart.py (python) or guest/prestart.js (node), and handed a request only when a fresh
 * start would have been the same. */
#ifndef AGENT_PRESTART_H
#define AGENT_PRESTART_H

#include <stddef.h>

#include "agent-preimport.h"
#include "agent-request.h"
#include "agent-run.h"

struct prestart {
  struct code_proc proc; /* proc.pid 0: nothing pre-started */
  int ctl_w;             /* the interpreter's fd 3: the call goes here */
  int note_r;            /* its fd 4, kept for warm-ups when pre-imported; else -1 */
  uint32_t id;           /* uid and gid it runs as (KEEP_ID: the agent's own) */
  const char *interp, *script;
  const struct preimport *pre; /* NULL: nothing pre-imported */
};

/* Starts `interp script [SPEC]` as the code's user with the base environment and waits until the
 * script says it is waiting. The code's user: uid/gid 1000 when the agent is root (microVM), else
 * the agent's own ids (a namespace jail, where the agent already is the code's unprivileged uid).
 * With pre (agent-preimport.h) the script first imports pre's modules. 0, or -1 with msg (nothing
 * left running). */
int prestart_start(struct prestart *ps, const char *interp, const char *script,
                   const struct preimport *pre, char *msg, size_t msglen);

/* 1 when req would have started its interpreter exactly as the pre-started one was: same
 * interpreter, one argument (the code file), the code's user, the same value for every
 * environment variable the interpreter reads at startup, and no file in the user site directory;
 * pre-imported, also the same value for every variable and no file the imports read. A request
 * that only differs elsewhere (other variables, cwd, files) is applied by the script. */
int prestart_fits(const struct prestart *ps, const struct request *req);

/* Hands req (cwd, code file, environment) to the waiting interpreter. 0, or -1 when it is gone
 * (then discard it and run req the ordinary way). */
int prestart_release(struct prestart *ps, const struct request *req);

/* Makes the waiting Python interpreter a session's kernel (k, which runs none yet): it is sent
 * 'K', the kernel script's path and a NUL on its fd 3, gives the hand-over its reseeds and
 * resets, runs that script in itself with fds 3 and 4 kept, and answers 'w' on fd 4 once it reads
 * cells. Only guest/prestart.py does (a pre-started node has closed its fd 4). 0 with ps emptied
 * into k; -1 when it cannot (then discard ps; k is untouched). Call only when prestart_fits():
 * the session's first cell would have started its kernel as this interpreter was started. */
int prestart_adopt(struct prestart *ps, const char *kernel, struct kernel *k);

/* Warm-up of a clone about to be pooled (agent-seed.h). Full: a second interpreter is
 * pre-started the same way and handed an empty call (/dev/null), which it runs through the call's
 * path and exits through finalisation; its output is drained and dropped. Without user-space
 * ASLR (the guest under TCG) it runs at the kept interpreter's addresses, so the code a call runs
 * is translated in this QEMU. The kept interpreter is not touched (a fork of it would leave every
 * page it writes during the call copy-on-write: +30-40 ms per call under TCG). A pre-imported
 * Python is instead asked ('T' on its fd 3, answered by 'w' on its fd 4) to rehearse the call's
 * path in itself and run its modules' hot paths again (a throwaway figure drawn and saved, ...):
 * a second one would import everything again. Not full (a clone made while calls run): a Python
 * only rehearses the call's path in itself ('R'; ~4x cheaper to make than a full warm-up, the
 * call then runs finalisation and exit untranslated); node runs nothing. */
void prestart_warm(struct prestart *ps, int full);

/* Warm-up without a pre-started interpreter: runs `interp /dev/null` as the code's user with the
 * base environment, waits for it and kills whatever it left. */
void warm_fresh(const char *interp);

/* Kills and reaps the pre-started interpreter, if any. */
void prestart_discard(struct prestart *ps);

#endif
