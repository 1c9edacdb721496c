/* The code's seccomp filter in a microVM guest: see agent-seccomp.h. */
#define _GNU_SOURCE
#include "agent-seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* BPF_MAXINSNS: the kernel refuses longer classic programs. */
#define MAX_INSNS 4096

static struct sock_filter insns[MAX_INSNS];
static struct sock_fprog prog = {0, insns};

int code_seccomp_load(const char *path, char *msg, size_t msglen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    snprintf(msg, msglen, "seccomp: open %s: %s", path, strerror(errno));
    return -1;
  }
  size_t got = 0;
  unsigned char *buf = (unsigned char *)insns;
  for (;;) {
    if (got == sizeof insns) { /* one byte more would be past the kernel's limit */
      char extra;
      if (read(fd, &extra, 1) != 0) {
        close(fd);
        snprintf(msg, msglen, "seccomp: %s has more than %d instructions", path, MAX_INSNS);
        return -1;
      }
      break;
    }
    ssize_t n = read(fd, buf + got, sizeof insns - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      snprintf(msg, msglen, "seccomp: read %s: %s", path, strerror(errno));
      close(fd);
      return -1;
    }
    if (n == 0) break;
    got += (size_t)n;
  }
  close(fd);
  if (got == 0 || got % sizeof(struct sock_filter) != 0) {
    snprintf(msg, msglen, "seccomp: %s is %zu bytes, not whole instructions", path, got);
    return -1;
  }
  prog.len = (unsigned short)(got / sizeof(struct sock_filter));
  return 0;
}

int code_seccomp_apply(void) {
  if (prog.len == 0) return 0;
  return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}
