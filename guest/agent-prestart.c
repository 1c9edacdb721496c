/* The pre-started interpreter: see agent-prestart.h. */
#define _GNU_SOURCE
#include "agent-prestart.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent-wire.h"

/* The code's user in the guest (GUEST_UID in src/backends/microvm/backend.ts). */
/* How long the interpreter may take to come up (under TCG: python ~1 s, node ~2 s). */
#define PRESTART_WAIT_MS 60000

/* The startup-relevant part of the base environment every call starts from (BASE_ENV in
 * src/runtimes/spec.ts). A call that changes any of it gets a fresh interpreter; keeping the two
 * in step keeps calls on the fast path, which test/microvm/prestart.test.ts checks. */
static char *const PRESTART_ENV[] = {
    "PATH=/usr/local/bin:/usr/bin:/bin",
    "HOME=/home/user",
    "LANG=C.UTF-8",
    "MPLBACKEND=module://scratchrun_mpl", /* read by a pre-imported matplotlib */
    "PYTHONPATH=/opt/scratchrun/python",  /* the display modules (DISPLAY_PYTHONPATH) */
    "PYTHONUNBUFFERED=1",
    "PYTHONDONTWRITEBYTECODE=1",
    NULL,
};
/* The user site directory (site.py adds it to sys.path at startup only if it exists then). */
static const char USER_SITE[] = "/home/user/.local";

/* guest/prestart.py keeps its fd 4 and rehearses the call's path when it reads "T" (a pooled
 * clone's warm-up); guest/prestart.js closes fd 4 after its note. */
static int rehearses(const struct prestart *ps) {
  size_t n = strlen(ps->script);
  return n >= 3 && strcmp(ps->script + n - 3, ".py") == 0;
}

/* Waits (PRESTART_WAIT_MS at most) for the script's "waiting" note: 1 when it came. */
static int await_note(int fd) {
  struct pollfd pfd = {fd, POLLIN, 0};
  char c = 0;
  int r;
  do r = poll(&pfd, 1, PRESTART_WAIT_MS);
  while (r < 0 && errno == EINTR);
  return r == 1 && read(fd, &c, 1) == 1 && c == 'w';
}

int prestart_start(struct prestart *ps, const char *interp, const char *script,
                   const struct preimport *pre, char *msg, size_t msglen) {
  memset(ps, 0, sizeof *ps);
  ps->ctl_w = ps->note_r = -1;
  int ctl[2], note[2];
  if (pipe2(ctl, O_CLOEXEC) < 0) {
    snprintf(msg, msglen, "pipe: %s", strerror(errno));
    return -1;
  }
  if (pipe2(note, O_CLOEXEC) < 0) {
    snprintf(msg, msglen, "pipe: %s", strerror(errno));
    close(ctl[0]);
    close(ctl[1]);
    return -1;
  }
  ps->id = geteuid() == 0 ? CODE_UID : KEEP_ID;
  char *argv[] = {(char *)interp, (char *)script, pre ? (char *)pre->spec : NULL, NULL};
  struct spawn_spec s = {argv, PRESTART_ENV, "/", ps->id, ps->id, {ctl[0], note[1]}, 2};
  int rc = spawn_code(&s, &ps->proc, msg, msglen);
  close(ctl[0]);
  close(note[1]);
  if (rc < 0) {
    close(ctl[1]);
    close(note[0]);
    return -1;
  }
  ps->ctl_w = ctl[1];
  ps->note_r = note[0];
  ps->interp = interp;
  ps->script = script;
  ps->pre = pre;
  int ok = await_note(ps->note_r);
  if (!rehearses(ps)) {
    close(ps->note_r);
    ps->note_r = -1;
  }
  if (!ok) {
    snprintf(msg, msglen, "%s %s did not start", interp, script);
    prestart_discard(ps);
    return -1;
  }
  return 0;
}

/* Variables read while a process starts: by the dynamic loader and libc (LD_LIBRARY_PATH also
 * steers every later dlopen, e.g. ctypes), by python (locale, site, sys.path, flags) and by node
 * (NODE_OPTIONS and the other NODE_* settings, libuv's UV_*, OpenSSL's configuration and CA
 * paths, colour choices some modules cache when first loaded). One list for both interpreters:
 * a python call that sets NODE_OPTIONS only loses the fast path. TZ is not in it: both scripts
 * apply it (time.tzset(); node resets its time zone when process.env.TZ is assigned). */
static const char *const STARTUP_PREFIXES[] = {
    "PYTHON", "LC_", "LANG=", "LANGUAGE=", "HOME=", "LD_", "MALLOC_", "GLIBC_TUNABLES=",
    "NODE_", "UV_", "OPENSSL_", "SSL_CERT_", "FORCE_COLOR=", "NO_COLOR=", "TERM=", NULL,
};

static int startup_relevant(const char *entry, const struct preimport *pre) {
  for (const char *const *p = STARTUP_PREFIXES; *p; p++)
    if (strncmp(entry, *p, strlen(*p)) == 0) return 1;
  return pre && preimport_reads_env(pre, entry);
}

static int in_prestart_env(const char *entry) {
  for (char *const *e = PRESTART_ENV; *e; e++)
    if (strcmp(*e, entry) == 0) return 1;
  return 0;
}

int prestart_fits(const struct prestart *ps, const struct request *req) {
  if (ps->proc.pid <= 0) return 0;
  if (req->argc != 2 || strcmp(req->argv[0], ps->interp) != 0) return 0;
  if (req->uid != ps->id || req->gid != ps->id) return 0;
  /* Request keys are unique (the host sends a map): equal counts + every request entry found
   * means the same startup-relevant set. */
  size_t want = 0, have = 0;
  for (char *const *e = PRESTART_ENV; *e; e++) want += (size_t)startup_relevant(*e, ps->pre);
  for (uint32_t i = 0; i < req->envc; i++) {
    if (!startup_relevant(req->envp[i], ps->pre)) continue;
    if (!in_prestart_env(req->envp[i])) return 0;
    have++;
  }
  if (have != want) return 0;
  size_t n = sizeof USER_SITE - 1;
  for (uint32_t i = 0; i < req->filec; i++) {
    const char *p = req->files[i].path;
    if (strncmp(p, USER_SITE, n) == 0 && (p[n] == '\0' || p[n] == '/')) return 0;
    if (ps->pre && preimport_reads_file(ps->pre, p)) return 0;
  }
  return 1;
}

static int put_field(int fd, const char *s) { return write_all(fd, s, strlen(s) + 1); }

int prestart_release(struct prestart *ps, const struct request *req) {
  if (ps->proc.pid <= 0 || waitpid(ps->proc.pid, NULL, WNOHANG | __WALL) != 0) return -1;
  /* A large environment exceeds the pipe: the script reads while this writes. */
  int rc = put_field(ps->ctl_w, req->cwd) < 0 || put_field(ps->ctl_w, req->argv[1]) < 0 ? -1 : 0;
  for (uint32_t i = 0; rc == 0 && i < req->envc; i++) rc = put_field(ps->ctl_w, req->envp[i]);
  if (close(ps->ctl_w) < 0) rc = -1;
  ps->ctl_w = -1;
  if (ps->note_r >= 0) close(ps->note_r);
  ps->note_r = -1;
  return rc;
}

int prestart_adopt(struct prestart *ps, const char *kernel, struct kernel *k) {
  if (ps->proc.pid <= 0 || !rehearses(ps) || ps->note_r < 0) return -1;
  if (waitpid(ps->proc.pid, NULL, WNOHANG | __WALL) != 0) return -1;
  size_t n = strlen(kernel);
  char msg[PIPE_BUF];
  if (n + 2 > sizeof msg) return -1;
  msg[0] = 'K';
  memcpy(msg + 1, kernel, n + 1);
  /* One write under PIPE_BUF: the script reads it as one chunk, as it does 'T' and 'R'. */
  if (write(ps->ctl_w, msg, n + 2) != (ssize_t)(n + 2) || !await_note(ps->note_r)) return -1;
  k->proc = ps->proc;
  k->ctl_w = ps->ctl_w;
  k->note_r = ps->note_r;
  memset(ps, 0, sizeof *ps);
  ps->ctl_w = ps->note_r = -1;
  return 0;
}

/* Drains p's stdout and stderr to EOF (bounded by PRESTART_WAIT_MS per wait) and closes them. */
static void drain(struct code_proc *p) {
  struct pollfd pfd[2] = {{p->out_r, POLLIN, 0}, {p->err_r, POLLIN, 0}};
  char buf[4096];
  int open_fds = 2;
  while (open_fds > 0) {
    int r = poll(pfd, 2, PRESTART_WAIT_MS);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    for (int i = 0; i < 2; i++) {
      if (pfd[i].fd < 0 || !pfd[i].revents) continue;
      if (read(pfd[i].fd, buf, sizeof buf) <= 0) {
        pfd[i].fd = -1;
        open_fds--;
      }
    }
  }
  close(p->out_r);
  close(p->err_r);
}

void prestart_warm(struct prestart *ps, int full) {
  if (ps->proc.pid <= 0) return;
  if (rehearses(ps) && (ps->pre || !full)) {
    /* In the kept interpreter: a second one would import everything again. */
    if (write(ps->ctl_w, full ? "T" : "R", 1) != 1 || !await_note(ps->note_r)) prestart_discard(ps);
    return;
  }
  if (!full) return;
  struct prestart w;
  char msg[256];
  if (prestart_start(&w, ps->interp, ps->script, NULL, msg, sizeof msg) < 0) return;
  char root[] = "/", *argv[] = {(char *)ps->interp, "/dev/null", NULL};
  struct request call;
  memset(&call, 0, sizeof call);
  call.cwd = root;
  call.argc = 2;
  call.argv = argv;
  call.envp = (char **)PRESTART_ENV; /* only read */
  while (PRESTART_ENV[call.envc]) call.envc++;
  if (prestart_release(&w, &call) < 0) {
    prestart_discard(&w);
    return;
  }
  drain(&w.proc);
  (void)kill(w.proc.pid, SIGKILL); /* it has exited, unless it hangs; never the one we keep */
  (void)waitpid(w.proc.pid, NULL, __WALL);
}

void warm_fresh(const char *interp) {
  char *argv[] = {(char *)interp, "/dev/null", NULL};
  struct spawn_spec s = {argv, PRESTART_ENV, "/", CODE_UID, CODE_UID, {-1, -1}, 0};
  struct code_proc p;
  char msg[256];
  if (spawn_code(&s, &p, msg, sizeof msg) < 0) return;
  drain(&p);
  kill_and_reap(); /* everything the run left: nothing else runs without a pre-start */
}

void prestart_discard(struct prestart *ps) {
  if (ps->proc.pid > 0) {
    (void)kill(ps->proc.pid, SIGKILL);
    (void)waitpid(ps->proc.pid, NULL, __WALL);
    close(ps->proc.out_r);
    close(ps->proc.err_r);
  }
  if (ps->ctl_w >= 0) close(ps->ctl_w);
  if (ps->note_r >= 0) close(ps->note_r);
  memset(ps, 0, sizeof *ps);
  ps->ctl_w = ps->note_r = -1;
}
