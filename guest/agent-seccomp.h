/* The code's seccomp filter in a microVM guest (docs/SECURITY.md, SEC-SYSCALLS).
 *
 * The namespace backend's bwrap installs the policy of src/jail/seccomp.ts on everything in the
 * jail, the agent included. A microVM guest has no bwrap: the same program, rendered by the host
 * when it builds the initramfs, is loaded here once (--seccomp PATH, before anything is
 * pre-started) and installed in every process the agent starts as the code's user (calls,
 * pre-started and warm-up interpreters alike: all go through spawn_code), after
 * PR_SET_NO_NEW_PRIVS and right before execve. The agent itself stays unfiltered: it sets the
 * clock and the network, which the policy refuses. */
#ifndef AGENT_SECCOMP_H
#define AGENT_SECCOMP_H

#include <stddef.h>

/* Reads the raw struct sock_filter[] at path (8-byte instructions, as bwrap --seccomp takes them).
 * 0, or -1 with msg. Without a successful load, code_seccomp_apply does nothing. */
int code_seccomp_load(const char *path, char *msg, size_t msglen);

/* Installs the loaded program on the calling process (which must have no_new_privs set or be
 * privileged); a no-op when none was loaded. 0, or -1 with errno. Only async-signal-safe calls:
 * it runs in a forked child. */
int code_seccomp_apply(void);

#endif
