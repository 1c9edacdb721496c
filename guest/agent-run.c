/* Running the user code: spawn, forward output under caps, enforce the timeout, kill the whole
 * tree, reap it. */
#define _GNU_SOURCE
#include "agent-run.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent-contain.h"
#include "agent-display.h"
#include "agent-seccomp.h"
#include "agent-wire.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void kill_tree(void) { (void)kill(-1, SIGKILL); }

void kill_and_reap(void) {
  for (;;) {
    kill_tree(); /* again after each reap: catches anything forked while we were killing */
    pid_t p = waitpid(-1, NULL, __WALL);
    if (p < 0) {
      if (errno == EINTR) continue;
      if (errno == ECHILD) return;
      return; /* cannot happen with valid arguments */
    }
  }
}

/* What the child reports through the exec-error pipe when it fails before execve returns. */
struct spawn_error {
  int stage;
  int err;
};
static const char *const stage_names[] = {"setup",
                                         "chdir",
                                         "execve",
                                         "drop privileges",
                                         "join the code's cgroup",
                                         "raise the OOM score",
                                         "empty the capability bounding set"};
enum { STAGE_SETUP, STAGE_CHDIR, STAGE_EXEC, STAGE_CREDS, STAGE_CGROUP, STAGE_OOM, STAGE_CAPS };

/* Marks every fd >= first close-on-exec: the fds are gone once execve succeeds, while the
 * exec-error pipe keeps working until then. */
static void cloexec_from(unsigned first) {
  if (syscall(SYS_close_range, first, ~0u, CLOSE_RANGE_CLOEXEC) == 0) return;
  long max = sysconf(_SC_OPEN_MAX);
  if (max < 0 || max > 1048576) max = 1048576;
  for (int fd = (int)first; fd < max; fd++) {
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0) (void)fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
}

static void child_fail(int errfd, int stage) {
  struct spawn_error se = {stage, errno};
  (void)write_all(errfd, &se, sizeof se);
  _exit(127);
}

/* In the forked child: becomes the code's uid/gid for good (real, effective, saved; no groups).
 * Only this child drops: the agent keeps its ids, so the code cannot signal or ptrace it. */
static int drop_privileges(uint32_t uid, uint32_t gid) {
  if (uid == KEEP_ID) return 0;
  /* The guest has no pids cgroup: bound the code's processes and threads the way the namespace
   * backend's cgroup does (LIMITS.pids). Counted per real uid, which only the code uses. */
  struct rlimit nproc = {SANDBOX_NPROC, SANDBOX_NPROC};
  if (setrlimit(RLIMIT_NPROC, &nproc) < 0) return -1;
  if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
    return -1;
  uid_t ru, eu, su;
  gid_t rg, eg, sg;
  if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sg) < 0 || ru != uid || eu != uid ||
      su != uid || rg != gid || eg != gid || sg != gid || getgroups(0, NULL) != 0) {
    errno = EPERM;
    return -1;
  }
  if (uid != 0 && setuid(0) == 0) {
    errno = EPERM; /* could regain root */
    return -1;
  }
  return 0;
}

/* In the forked child: never returns. s->extra[i] becomes fd 3 + i. */
static void child_exec(const struct spawn_spec *s, pid_t agent, int devnull, int out_w, int err_w,
                       int errfd) {
  /* Out of the way of fds 3.. before the extra fds are moved there. */
  int e = fcntl(errfd, F_DUPFD_CLOEXEC, 16);
  if (e >= 0) errfd = e;
  if (setsid() < 0) child_fail(errfd, STAGE_SETUP);
  /* While still the agent's root: the code's cgroup, OOM score and bounding set (microVM). The
   * agent took the code's filesystem identity for its files (agent.c, use_code_fs_identity), which
   * would refuse the cgroup's root-only directory and our own /proc files: act as our euid. */
  (void)setfsgid(getegid());
  (void)setfsuid(geteuid());
  enum contain_step step;
  if (code_contain_apply(&step) < 0)
    child_fail(errfd, step == CONTAIN_CGROUP ? STAGE_CGROUP
                      : step == CONTAIN_OOM  ? STAGE_OOM
                                             : STAGE_CAPS);
  /* Before PR_SET_PDEATHSIG: changing credentials clears the parent-death signal. */
  if (drop_privileges(s->uid, s->gid) < 0) child_fail(errfd, STAGE_CREDS);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) child_fail(errfd, STAGE_SETUP);
  if (getppid() != agent) _exit(127); /* the agent died before PDEATHSIG was armed */
  if (dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
    child_fail(errfd, STAGE_SETUP);
  int high[SPAWN_MAX_EXTRA];
  for (int i = 0; i < s->nextra; i++)
    if ((high[i] = fcntl(s->extra[i], F_DUPFD_CLOEXEC, 16)) < 0) child_fail(errfd, STAGE_SETUP);
  for (int i = 0; i < s->nextra; i++)
    if (dup2(high[i], 3 + i) < 0) child_fail(errfd, STAGE_SETUP); /* dup2 clears CLOEXEC */
  if (chdir(s->cwd) < 0) child_fail(errfd, STAGE_CHDIR);
  umask(022);
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP) (void)signal(sig, SIG_DFL); /* SIGPIPE was ignored */
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, NULL) < 0) child_fail(errfd, STAGE_SETUP);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) child_fail(errfd, STAGE_SETUP);
  if (code_seccomp_apply() < 0) child_fail(errfd, STAGE_SETUP); /* microVM; bwrap's otherwise */
  cloexec_from(3u + (unsigned)s->nextra);
  execve(s->argv[0], s->argv, s->envp);
  child_fail(errfd, STAGE_EXEC);
}

static sigset_t sigchld_only(void) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  return chld;
}

int spawn_code(const struct spawn_spec *s, struct code_proc *p, char *msg, size_t msglen) {
  int outp[2], errp[2], ep[2];
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0 || pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 ||
      pipe2(ep, O_CLOEXEC) < 0) {
    snprintf(msg, msglen, "pipes: %s", strerror(errno));
    return -1;
  }
  /* Before the fork: the child's exit must wait, pending, for supervise()'s signalfd (a
   * pre-started interpreter may die long before that). */
  sigset_t chld = sigchld_only();
  sigprocmask(SIG_BLOCK, &chld, NULL);
  pid_t agent = getpid();
  pid_t child = fork();
  if (child < 0) {
    snprintf(msg, msglen, "fork: %s", strerror(errno));
    return -1;
  }
  if (child == 0) child_exec(s, agent, devnull, outp[1], errp[1], ep[1]);
  close(outp[1]);
  close(errp[1]);
  close(ep[1]);
  close(devnull);

  struct spawn_error se;
  ssize_t got = read_full(ep[0], &se, sizeof se);
  close(ep[0]);
  if (got == (ssize_t)sizeof se) {
    (void)kill(child, SIGKILL);
    (void)waitpid(child, NULL, __WALL);
    close(outp[0]);
    close(errp[0]);
    int st = se.stage >= STAGE_SETUP && se.stage <= STAGE_CAPS ? se.stage : STAGE_SETUP;
    if (st >= STAGE_CGROUP)
      snprintf(msg, msglen, "%s: %s", stage_names[st], strerror(se.err));
    else if (st == STAGE_CREDS)
      snprintf(msg, msglen, "%s to %u:%u: %s", stage_names[st], s->uid, s->gid,
               strerror(se.err));
    else
      snprintf(msg, msglen, "%s %s: %s", stage_names[st], st == STAGE_CHDIR ? s->cwd : s->argv[0],
               strerror(se.err));
    return -1;
  }
  p->pid = child;
  p->out_r = outp[0];
  p->err_r = errp[0];
  return 0;
}

struct stream {
  int fd;
  uint8_t type;
  uint64_t cap, sent;
  uint8_t *truncated;
};

/* Reads once from s->fd and forwards at most the cap. Returns 1 on overflow, 0 otherwise;
 * closes and marks the stream done on EOF (or EAGAIN when draining, *idle set). */
static int pump(int host_out, struct stream *s, uint8_t *buf, int *idle) {
  uint64_t room = *s->truncated ? 0 : s->cap - s->sent;
  size_t want = *s->truncated || room >= MAX_CHUNK ? MAX_CHUNK : (size_t)(room + 1);
  ssize_t n = read(s->fd, buf, want);
  if (n < 0) {
    if (errno == EINTR) return 0;
    if (errno == EAGAIN && idle) {
      *idle = 1;
      return 0;
    }
    n = 0; /* treat read errors as EOF */
  }
  if (n == 0) {
    close(s->fd);
    s->fd = -1;
    return 0;
  }
  size_t send = (uint64_t)n > room ? (size_t)room : (size_t)n;
  if (send > 0) send_frame(host_out, s->type, buf, send);
  s->sent += send;
  if ((uint64_t)n > room && !*s->truncated) {
    *s->truncated = 1;
    return 1;
  }
  return 0; /* past the cap: discarded */
}

/* What supervise() hands the display channel: the streams to forward before an output. */
struct drain_ctx {
  int host_out;
  struct stream *streams;
  uint8_t *buf;
  struct run_result *res;
  int *decided;
};

static void set_reason(struct run_result *res, int *decided, enum exit_reason r);

/* Forwards what each stream's pipe holds now (and little more: a writer still printing is not
 * waited for), so that an output about to be read lands after it. */
static void drain_now(void *arg) {
  struct drain_ctx *c = arg;
  for (int i = 0; i < 2; i++) {
    struct stream *s = &c->streams[i];
    int avail = 0;
    if (s->fd < 0 || ioctl(s->fd, FIONREAD, &avail) < 0 || avail <= 0) continue;
    int flags = fcntl(s->fd, F_GETFL);
    (void)fcntl(s->fd, F_SETFL, flags | O_NONBLOCK);
    int idle = 0;
    for (int reads = avail / MAX_CHUNK + 1; s->fd >= 0 && !idle && reads > 0; reads--)
      if (pump(c->host_out, s, c->buf, &idle)) set_reason(c->res, c->decided, R_OUTPUT_LIMIT);
    if (s->fd >= 0) (void)fcntl(s->fd, F_SETFL, flags);
  }
}

/* Host frames while the code runs: only K is expected. Returns 1 when the run must stop. */
static int host_says_stop(int host_in, uint8_t *hbuf, size_t *hlen, const char **why) {
  ssize_t n = read(host_in, hbuf + *hlen, 64 - *hlen);
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN) return 0;
    n = 0;
  }
  if (n == 0) { /* host gone: nobody wants the result */
    kill_and_reap();
    _exit(3);
  }
  *hlen += (size_t)n;
  if (*hlen < 5) return 0;
  *why = (get_u32(hbuf) == 1 && hbuf[4] == T_KILL) ? "" : "unexpected frame from host";
  return 1;
}

static void set_reason(struct run_result *res, int *decided, enum exit_reason r) {
  if (*decided) return; /* the first termination reason wins */
  res->reason = r;
  res->value = 0;
  *decided = 1;
}

/* A kernel's cell, for supervise(): the note fd it reports the cell's status on, and whether it
 * outlived the cell. NULL: the code is a process of its own, whose tree dies at the end. */
struct cell {
  int note_r;
  int kept; /* out: the cell ended with its note and the kernel still runs */
};

static void supervise(int host_in, int host_out, const struct request *req,
                      struct run_result *res, const struct code_proc *p, uint64_t t0,
                      struct cell *cell);

void run_code(int host_in, int host_out, const struct request *req, struct run_result *res) {
  memset(res, 0, sizeof *res);
  struct spawn_spec s = {req->argv, req->envp, req->cwd, req->uid, req->gid, {-1, -1}, 0};
  struct code_proc p;
  uint64_t t0 = now_ms();
  if (spawn_code(&s, &p, res->message, sizeof res->message) < 0) {
    res->reason = R_SPAWN_FAILED; /* spawn_code reaped the child that failed to exec */
    return;
  }
  supervise(host_in, host_out, req, res, &p, t0, NULL);
}

void run_started(int host_in, int host_out, const struct request *req, struct run_result *res,
                 const struct code_proc *p) {
  memset(res, 0, sizeof *res);
  supervise(host_in, host_out, req, res, p, now_ms(), NULL);
}

/* From S to the tree's death (or, for a kernel's cell, to its note): output under caps,
 * deadline, K and EOF from the host. */
static void supervise(int host_in, int host_out, const struct request *req,
                      struct run_result *res, const struct code_proc *p, uint64_t t0,
                      struct cell *cell) {
  pid_t child = p->pid;
  sigset_t chld = sigchld_only();
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) {
    kill_and_reap();
    close(p->out_r);
    close(p->err_r);
    res->reason = R_SPAWN_FAILED;
    snprintf(res->message, sizeof res->message, "signalfd: %s", strerror(errno));
    return;
  }

  uint8_t started[4];
  put_u32(started, (uint32_t)child);
  send_frame(host_out, T_STARTED, started, sizeof started);

  uint8_t *buf = malloc(MAX_CHUNK);
  if (!buf) {
    kill_and_reap();
    res->reason = R_SPAWN_FAILED;
    snprintf(res->message, sizeof res->message, "out of memory");
    return;
  }
  struct stream streams[2] = {
      {p->out_r, T_STDOUT, req->max_stdout, 0, &res->stdout_truncated},
      {p->err_r, T_STDERR, req->max_stderr, 0, &res->stderr_truncated},
  };
  uint64_t deadline = t0 + req->timeout_ms;
  uint8_t hbuf[64];
  size_t hlen = 0;
  int decided = 0, main_done = 0, main_status = 0, noted = 0;
  int32_t cell_status = 0;
  int note_fd = cell ? cell->note_r : -1;
  if (cell) cell->kept = 0;
  struct display_run shown;
  display_begin(&shown);
  struct drain_ctx drain = {host_out, streams, buf, res, &decided};

  while (!main_done && !decided && !noted) {
    uint64_t now = now_ms();
    if (now >= deadline) {
      set_reason(res, &decided, R_TIMEOUT);
      break;
    }
    uint64_t left = deadline - now;
    struct pollfd pfd[6] = {
        {host_in, POLLIN, 0},
        {streams[0].fd, POLLIN, 0},
        {streams[1].fd, POLLIN, 0},
        {sfd, POLLIN, 0},
        {note_fd, POLLIN, 0},
        {display_fd(&shown), POLLIN, 0},
    };
    int pr = poll(pfd, 6, left > 60000 ? 60000 : (int)left);
    if (pr < 0) {
      if (errno == EINTR) continue;
      set_reason(res, &decided, R_KILLED);
      snprintf(res->message, sizeof res->message, "poll: %s", strerror(errno));
      break;
    }
    if (pfd[0].revents) {
      const char *why = "";
      if (host_says_stop(host_in, hbuf, &hlen, &why)) {
        set_reason(res, &decided, R_KILLED);
        snprintf(res->message, sizeof res->message, "%s", why);
      }
    }
    for (int i = 0; i < 2; i++)
      if (pfd[i + 1].revents && streams[i].fd >= 0 && pump(host_out, &streams[i], buf, NULL))
        set_reason(res, &decided, R_OUTPUT_LIMIT);
    /* Before the child's exit: an output its writer placed is read before the loop ends. */
    if (pfd[5].revents && !decided) display_ready(&shown, host_out, buf, drain_now, &drain);
    if (pfd[3].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {
      }
      for (;;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG | __WALL);
        if (p <= 0) break;
        if (p == child) {
          main_done = 1;
          main_status = st;
        }
      }
    }
    /* The cell's note: 4 bytes, its status. Its output was written before it (the kernel flushes
     * first), so it is in the pipes now. EOF or a short note: the kernel is exiting (os._exit, a
     * crash), which its exit status reports; the note pipe is not polled again. */
    if (pfd[4].revents && !main_done) {
      uint8_t b[4];
      if (read_full(note_fd, b, sizeof b) == (ssize_t)sizeof b) {
        noted = 1;
        cell_status = (int32_t)(b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24);
      } else {
        note_fd = -1;
      }
    }
  }

  if (noted && !decided) {
    /* The cell is over and the kernel keeps running: what it wrote is buffered in the pipes. */
    res->duration_ms = (uint32_t)(now_ms() - t0);
    close(sfd);
    display_finish(&shown, host_out, buf, 0);
    for (int i = 0; i < 2; i++) {
      struct stream *s = &streams[i];
      int flags = fcntl(s->fd, F_GETFL);
      (void)fcntl(s->fd, F_SETFL, flags | O_NONBLOCK);
      int idle = 0;
      while (s->fd >= 0 && !idle)
        if (pump(host_out, s, buf, &idle)) set_reason(res, &decided, R_OUTPUT_LIMIT);
      if (s->fd >= 0) (void)fcntl(s->fd, F_SETFL, flags);
    }
    free(buf);
    if (!decided && streams[0].fd >= 0 && streams[1].fd >= 0) {
      res->reason = R_EXITED;
      res->value = cell_status;
      cell->kept = 1;
      return;
    }
    /* Over its output cap in the drain, or its pipes closed: the kernel goes with the tree. */
    for (int i = 0; i < 2; i++)
      if (streams[i].fd >= 0) {
        close(streams[i].fd);
        streams[i].fd = -1;
      }
    for (;;) {
      kill_tree();
      pid_t p = waitpid(-1, NULL, __WALL);
      if (p < 0 && errno == EINTR) continue;
      if (p < 0) break;
    }
    if (!decided) set_reason(res, &decided, R_KILLED);
    return;
  }

  /* The tree dies whatever happened: background daemons do not outlive the call. Grandchildren
   * may hold the pipes open, so never wait for pipe EOF before this. */
  int st;
  for (;;) {
    kill_tree();
    pid_t p = waitpid(-1, &st, __WALL);
    if (p < 0 && errno == EINTR) continue;
    if (p < 0) break;
    if (p == child) {
      main_done = 1;
      main_status = st;
    }
  }
  res->duration_ms = (uint32_t)(now_ms() - t0);
  close(sfd);

  /* Everything that could write to the pipes is dead: drain what is buffered, then the outputs
   * whose writers died waiting (a figure shown as the process exits was placed before that). */
  for (int i = 0; i < 2; i++) {
    struct stream *s = &streams[i];
    if (s->fd < 0) continue;
    (void)fcntl(s->fd, F_SETFL, O_NONBLOCK);
    int idle = 0;
    while (s->fd >= 0 && !idle)
      if (pump(host_out, s, buf, &idle)) set_reason(res, &decided, R_OUTPUT_LIMIT);
    if (s->fd >= 0) close(s->fd);
  }
  display_finish(&shown, host_out, buf, 1);
  free(buf);

  if (!decided) {
    if (main_done && WIFEXITED(main_status)) {
      res->reason = R_EXITED;
      res->value = WEXITSTATUS(main_status);
    } else if (main_done && WIFSIGNALED(main_status)) {
      res->reason = R_SIGNALED;
      res->value = WTERMSIG(main_status);
    } else {
      res->reason = R_KILLED; /* unreachable: the loop ends only with a reason or main exit */
    }
  }
}

/* The cell message on the kernel's fd 3: its length (4 bytes, little-endian), then cwd, the code
 * file and every environment entry, each NUL-terminated. */
static int send_cell(int fd, const struct request *req) {
  size_t n = strlen(req->cwd) + 1 + strlen(req->argv[1]) + 1;
  for (uint32_t i = 0; i < req->envc; i++) n += strlen(req->envp[i]) + 1;
  if (n > UINT32_MAX) return -1;
  uint8_t len[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
  if (write_all(fd, len, sizeof len) < 0) return -1;
  if (write_all(fd, req->cwd, strlen(req->cwd) + 1) < 0) return -1;
  if (write_all(fd, req->argv[1], strlen(req->argv[1]) + 1) < 0) return -1;
  for (uint32_t i = 0; i < req->envc; i++)
    if (write_all(fd, req->envp[i], strlen(req->envp[i]) + 1) < 0) return -1;
  return 0;
}

static void kernel_forget(struct kernel *k) {
  if (k->ctl_w >= 0) close(k->ctl_w);
  if (k->note_r >= 0) close(k->note_r);
  memset(k, 0, sizeof *k);
  k->ctl_w = k->note_r = -1;
}

void kernel_init(struct kernel *k) {
  memset(k, 0, sizeof *k);
  k->ctl_w = k->note_r = -1;
}

void run_cell(int host_in, int host_out, const struct request *req, struct run_result *res,
              struct kernel *k, int *fresh) {
  memset(res, 0, sizeof *res);
  *fresh = 0;
  uint64_t t0 = now_ms();
  if (req->argc != 2) {
    res->reason = R_SPAWN_FAILED;
    snprintf(res->message, sizeof res->message, "a session's interpreter runs one code file");
    return;
  }
  if (k->proc.pid > 0 && waitpid(k->proc.pid, NULL, WNOHANG | __WALL) != 0) {
    /* It died between cells (the OOM killer, a thread of the last cell): start a fresh one. */
    close(k->proc.out_r);
    close(k->proc.err_r);
    kernel_forget(k);
  }
  if (k->proc.pid <= 0) {
    int ctl[2], note[2];
    if (pipe2(ctl, O_CLOEXEC) < 0) {
      res->reason = R_SPAWN_FAILED;
      snprintf(res->message, sizeof res->message, "pipe: %s", strerror(errno));
      return;
    }
    if (pipe2(note, O_CLOEXEC) < 0) {
      close(ctl[0]);
      close(ctl[1]);
      res->reason = R_SPAWN_FAILED;
      snprintf(res->message, sizeof res->message, "pipe: %s", strerror(errno));
      return;
    }
    char *argv[] = {req->argv[0], req->kernel, NULL};
    struct spawn_spec s = {argv, req->envp, req->cwd, req->uid, req->gid, {ctl[0], note[1]}, 2};
    int rc = spawn_code(&s, &k->proc, res->message, sizeof res->message);
    close(ctl[0]);
    close(note[1]);
    if (rc < 0) {
      close(ctl[1]);
      close(note[0]);
      kernel_init(k);
      res->reason = R_SPAWN_FAILED;
      return;
    }
    k->ctl_w = ctl[1];
    k->note_r = note[0];
    *fresh = 1;
  }
  struct cell cell = {k->note_r, 0};
  if (send_cell(k->ctl_w, req) < 0) {
    /* It died between cells: supervise() reaps it and reports how it ended. */
    (void)kill(k->proc.pid, SIGKILL);
  }
  supervise(host_in, host_out, req, res, &k->proc, t0, &cell);
  if (!cell.kept) {
    kernel_forget(k); /* supervise() killed the tree and closed its pipes */
    if (res->message[0] == '\0')
      snprintf(res->message, sizeof res->message, "the interpreter ended");
  }
}
