/* What the guest kernel gives the code besides seccomp, in a microVM (docs/SECURITY.md, H20 and
 * H22): the namespace backend gets the same from bwrap (--cap-drop ALL) and from the host's
 * memory cgroup.
 *
 * - The code's memory cgroup (--cgroup DIR, made by guest/init with memory.max = memory_mb): every
 *   process started as the code's user joins it before it drops root, so its pages and the tmpfs
 *   pages it writes (/tmp, /home/user, /dev/shm) count against memory_mb, and the cgroup's OOM
 *   killer ends it.
 * - An empty capability bounding set: nothing the code execs can gain a capability.
 * - OOM order: the agent at OOM_SCORE_ADJ_MIN (never the kernel's choice while the code lives),
 *   the code at OOM_SCORE_ADJ_MAX, set while still root so the code cannot lower it again. */
#ifndef AGENT_CONTAIN_H
#define AGENT_CONTAIN_H

#include <stddef.h>

/* The agent's own OOM score: -1000. Needs CAP_SYS_RESOURCE (the guest's root); 0 or -1 with msg. */
int agent_oom_protect(char *msg, size_t msglen);

/* Remembers DIR/cgroup.procs as the code's cgroup (checked writable now). 0 or -1 with msg.
 * Without it, code_contain_apply joins no cgroup (the namespace backend's host puts the whole
 * jail in one). */
int code_cgroup_load(const char *dir, char *msg, size_t msglen);

/* Which step of code_contain_apply failed. */
enum contain_step { CONTAIN_CGROUP, CONTAIN_OOM, CONTAIN_CAPS };

/* In a forked child about to become the code, while it still has the agent's credentials: joins
 * the code's cgroup (if loaded), raises its OOM score to the maximum (pinned there when privileged)
 * and empties the capability bounding set (each capability still in it; none left is success).
 * 0, or -1 with errno and *failed set. Only async-signal-safe calls. */
int code_contain_apply(enum contain_step *failed);

#endif
