/* The code's cgroup, capability bounding set and OOM score in the guest: see agent-contain.h. */
#define _GNU_SOURCE
#include "agent-contain.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static char procs_path[256];

static int write_text(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return -1;
  size_t n = strlen(text);
  ssize_t w = write(fd, text, n);
  int saved = errno;
  close(fd);
  if (w != (ssize_t)n) {
    errno = w < 0 ? saved : EIO;
    return -1;
  }
  return 0;
}

int agent_oom_protect(char *msg, size_t msglen) {
  if (write_text("/proc/self/oom_score_adj", "-1000") == 0) return 0;
  snprintf(msg, msglen, "oom_score_adj -1000: %s", strerror(errno));
  return -1;
}

int code_cgroup_load(const char *dir, char *msg, size_t msglen) {
  int n = snprintf(procs_path, sizeof procs_path, "%s/cgroup.procs", dir);
  if (n < 0 || (size_t)n >= sizeof procs_path) {
    procs_path[0] = 0;
    snprintf(msg, msglen, "cgroup: path too long: %s", dir);
    return -1;
  }
  if (access(procs_path, W_OK) < 0) {
    snprintf(msg, msglen, "cgroup: %s: %s", procs_path, strerror(errno));
    procs_path[0] = 0;
    return -1;
  }
  return 0;
}

int code_contain_apply(enum contain_step *failed) {
  *failed = CONTAIN_CGROUP;
  if (procs_path[0] && write_text(procs_path, "0") < 0) return -1;
  *failed = CONTAIN_OOM;
  /* Raising one's own score needs nothing; written with CAP_SYS_RESOURCE it is also the floor.
   * Unprivileged (the namespace backend's jail) the non-dumpable child cannot open its own file;
   * there the host's memory cgroup ends the whole jail on OOM, agent included. */
  if (write_text("/proc/self/oom_score_adj", "1000") < 0 && geteuid() == 0) return -1;
  *failed = CONTAIN_CAPS;
  for (int cap = 0; cap < 64; cap++) {
    int has = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
    if (has < 0) break; /* past the kernel's last capability */
    if (has == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) return -1;
  }
  return 0;
}
