/*
 * ScratchRun sandbox agent: speaks docs/PROTOCOL.md on fd 0/1 (or on --channel PATH), runs one
 * request (or a session's requests), reports, exits. Everything the host sends is checked; everything the code does is
 * contained by killing the whole process tree with kill(-1, SIGKILL), which is why the agent
 * refuses to run where that could reach processes outside the sandbox.
 *
 * A request may open a session (docs/decisions/0013-sessions.md): then the agent reads the next Q
 * after D, until the host hangs up, and a kernel given in the request keeps the interpreter.
 *
 * Usage: agent [--channel PATH] [--own-kernel] [--prestart INTERP SCRIPT [--preimport SPEC]]
 *              [--warm INTERP] [--warm-also LIST] [--seed PORT RESOLV] [--seccomp PATH]
 *              [--cgroup DIR]
 *   --channel PATH  open PATH read/write for the protocol instead of using fd 0/1
 *   --own-kernel    this kernel runs only this sandbox (microVM): kill(-1) is safe without a pid
 *                   namespace, and /proc/vmstat oom_kill counts only this sandbox's OOM kills
 *   --prestart INTERP SCRIPT
 *                   start INTERP SCRIPT now (agent-prestart.h) and give it the request if it fits
 *   --preimport SPEC
 *                   the pre-started Python imports modules first (agent-preimport.h)
 *   --warm INTERP   without a pre-started interpreter, what a warm-up request in the seed step
 *                   runs (agent-prestart.h, warm_fresh)
 *   --warm-also LIST  up to 4 comma-separated interpreters a 'U' warm-up request names by
 *                   number (a shell's clone warms those its recent calls started)
 *   --seed PORT RESOLV
 *                   microVM: after any pre-start, take this VM's seed from virtio-console PORT
 *                   (agent-seed.h; a snapshot template is saved while waiting there), before
 *                   opening the channel. RESOLV: where network "public" puts resolv.conf.
 *   --seccomp PATH  microVM: the seccomp program (src/jail/seccomp.ts, rendered at build time) to
 *                   install in every process started as the code's user (agent-seccomp.h)
 *   --cgroup DIR    microVM: the code's memory cgroup, which every process started as the code's
 *                   user joins (agent-contain.h)
 * With --own-kernel the agent also takes the lowest OOM score: the code is the OOM killer's
 * choice, never the agent that reports it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent-contain.h"
#include "agent-display.h"
#include "agent-files.h"
#include "agent-prestart.h"
#include "agent-request.h"
#include "agent-run.h"
#include "agent-seccomp.h"
#include "agent-seed.h"
#include "agent-wire.h"

/* The initial pid namespace has this fixed inode (PROC_PID_INIT_INO in the kernel). */
#define PROC_PID_INIT_INO 0xEFFFFFFCu

struct agent_opts {
  const char *channel;
  int own_kernel;
  const char *prestart_interp, *prestart_script;
  const char *preimport;
  const char *warm_interp;
  /* --warm-also: up to WARM_ALSO_MAX more interpreters a warm-up request may name by number. */
  const char *warm_also[4];
  int warm_alsoc;
  const char *seed_port, *seed_resolv;
  const char *seccomp;
  const char *cgroup;
};

struct warm_ctx {
  struct prestart *ps;
  const char *interp;
  const struct agent_opts *o;
};

static uint32_t read_oom_kills(const struct agent_opts *o);

/* The code directory (CODE_DIR in src/schema/limits.ts): every call writes its code file there. */
#define WARM_FILE "/run/scratchrun/.scratchrun-warm-up"

/* A warm-up request (agent-seed.h): run what a call will run, so that a pooled clone's QEMU has
 * translated it before the call comes. Besides the interpreter (agent-prestart.h; a full warm-up
 * runs a second interpreter, a cheap one only rehearses in the kept one), the agent's own steps:
 * creating a file where the call's code file goes (then removed: the call creates its own files
 * in the same directory) and reading the OOM counter. Under TCG their first run in a clone took
 * ~20 ms of the call. */
static void warm_up(void *arg, int kind, unsigned also) {
  struct warm_ctx *w = arg;
  if (kind == 'U') {
    /* One of the template's --warm-also interpreters on /dev/null: what a shell call that starts
     * it would otherwise translate first (the host asks for those its recent calls named). Never
     * beside a pre-started interpreter: warm_fresh() reaps every process. */
    if (also < (unsigned)w->o->warm_alsoc && w->ps->proc.pid <= 0) warm_fresh(w->o->warm_also[also]);
    return;
  }
  int full = kind == 'T';
  static const uint8_t data[] = "warm\n";
  struct req_file f = {WARM_FILE, 0600, data, sizeof data - 1};
  struct request r;
  memset(&r, 0, sizeof r);
  r.filec = 1;
  r.files = &f;
  char err[256];
  if (write_request_files(&r, err, sizeof err) == 0) (void)unlink(WARM_FILE);
  (void)read_oom_kills(w->o);
  if (w->ps->proc.pid > 0) prestart_warm(w->ps, full);
  else if (w->interp && full) warm_fresh(w->interp);
}

static int tree_started;

static void host_gone(void) {
  if (tree_started) kill_and_reap();
}

/* kill(-1) reaches every process we may signal except ourselves and the init of our pid
 * namespace. That is the sandbox's tree only when we are in a non-initial pid namespace, are
 * init ourselves, or the kernel is the sandbox's own. */
static int kill_all_is_contained(const struct agent_opts *o) {
  if (o->own_kernel || getpid() == 1) return 1;
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) < 0) return 0;
  return st.st_ino != PROC_PID_INIT_INO;
}

/* fds 0-2 must be open so that pipes never land on them (dup2 onto itself keeps CLOEXEC). */
static int ensure_std_fds(void) {
  for (int fd = 0; fd < 3; fd++) {
    if (fcntl(fd, F_GETFD) >= 0) continue;
    int n = open("/dev/null", O_RDWR);
    if (n != fd) return -1;
  }
  return 0;
}

static uint32_t read_oom_kills(const struct agent_opts *o) {
  if (!o->own_kernel) return 0; /* shared kernel: the host reads its cgroup instead */
  FILE *f = fopen("/proc/vmstat", "re");
  if (!f) return 0;
  static const char key[] = "oom_kill ";
  char line[128];
  unsigned long long v = 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, sizeof key - 1) == 0) {
      v = strtoull(line + sizeof key - 1, NULL, 10);
      break;
    }
  fclose(f);
  return (uint32_t)v;
}

/* Length of the longest prefix of s that is well-formed UTF-8 (the host rejects anything else;
 * snprintf truncation can cut a character in half). */
static size_t utf8_prefix(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < len) {
    unsigned c = p[i];
    size_t n;
    unsigned min;
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, min = 0x10000;
    } else {
      return i;
    }
    if (i + n >= len) return i; /* incomplete at the end */
    unsigned cp = c & (0x3Fu >> n);
    for (size_t k = 1; k <= n; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n + 1;
  }
  return i;
}

static void send_exit(int out, const struct run_result *r, uint32_t oom_kills) {
  size_t mlen = strnlen(r->message, sizeof r->message);
  if (mlen > MAX_MESSAGE_BYTES) mlen = MAX_MESSAGE_BYTES;
  mlen = utf8_prefix(r->message, mlen);
  uint8_t p[1 + 4 + 1 + 1 + 4 + 4 + 4 + sizeof r->message];
  size_t n = 0;
  p[n++] = (uint8_t)r->reason;
  put_u32(p + n, (uint32_t)r->value);
  n += 4;
  p[n++] = r->stdout_truncated;
  p[n++] = r->stderr_truncated;
  put_u32(p + n, r->duration_ms);
  n += 4;
  put_u32(p + n, oom_kills);
  n += 4;
  put_u32(p + n, (uint32_t)mlen);
  n += 4;
  memcpy(p + n, r->message, mlen);
  n += mlen;
  send_frame(out, T_EXIT, p, n);
}

/* X setup_failed, then D: no F frames (docs/PROTOCOL.md). */
static int setup_failed(int out, const char *msg) {
  struct run_result r;
  memset(&r, 0, sizeof r);
  r.reason = R_SETUP_FAILED;
  snprintf(r.message, sizeof r.message, "%s", msg);
  send_exit(out, &r, 0);
  send_frame(out, T_DONE, NULL, 0);
  return 0;
}

/* Request files are written, and return files read, with the code's identity: fsuid/fsgid set to
 * it and no supplementary groups (changing the fsuid away from 0 also clears the filesystem
 * capabilities). The agent's own real, effective and saved ids stay what they are, so code running
 * as another uid can neither signal nor ptrace it; only the forked child drops for good
 * (agent-run.c). */
static int use_code_fs_identity(const struct request *req, char *err, size_t errlen) {
  if (req->uid == KEEP_ID) return 0;
  if (setgroups(0, NULL) < 0) {
    snprintf(err, errlen, "setgroups: %s", strerror(errno));
    return -1;
  }
  (void)setfsgid(req->gid);
  (void)setfsuid(req->uid);
  /* setfsuid/setfsgid report no errors; an invalid id (-1) changes nothing and returns the
   * current value, which is how the result is checked. */
  if ((uint32_t)setfsuid((uid_t)-1) != req->uid || (uint32_t)setfsgid((gid_t)-1) != req->gid) {
    snprintf(err, errlen, "filesystem identity %u:%u not taken", req->uid, req->gid);
    return -1;
  }
  return 0;
}

/* How long a VM's agent waits, after its last frame, for the host to hang up. */
#define LINGER_MS 10000

/* In a VM the agent's exit ends the guest (init reboots, QEMU exits), and frames still queued in
 * the guest's virtio-serial buffers or QEMU's chardev would be lost with it: the host saw its
 * connection close in the middle of the returned files. So the agent waits for the host, which
 * has read everything once it hangs up or kills the VM, bounded in case it never does. */
static void linger_until_host_hangs_up(int in) {
  struct pollfd p = {.fd = in, .events = POLLIN};
  uint8_t sink[256];
  while (poll(&p, 1, LINGER_MS) > 0) {
    if ((p.revents & (POLLHUP | POLLERR | POLLNVAL)) && !(p.revents & POLLIN)) return;
    if (read(in, sink, sizeof sink) <= 0) return;
  }
}

/* One request, start to finish. Returns the process exit code. */
static int agent_main(const struct agent_opts *o) {
  signal(SIGPIPE, SIG_IGN);
  umask(0); /* request files get exactly the mode asked for */
  if (ensure_std_fds() < 0) return 2;
  if (!kill_all_is_contained(o)) {
    fprintf(stderr,
            "agent: refusing to run: not in a pid namespace, not pid 1 and no --own-kernel; "
            "kill(-1) would reach processes outside the sandbox\n");
    return 2;
  }
  int in = 0, out = 1;
  if (o->channel) {
    int fd = open(o->channel, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
      fprintf(stderr, "agent: open %s: %s\n", o->channel, strerror(errno));
      return 2;
    }
    in = out = fd;
  }
  /* The code may share our uid (namespace backend, uid "keep"): keep it from ptracing or reading
   * us. With a uid to run as, the code does not share it (see use_code_fs_identity). */
  (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
    fprintf(stderr, "agent: PR_SET_CHILD_SUBREAPER: %s\n", strerror(errno));
    return 2;
  }
  on_host_lost = host_gone;
  if (o->own_kernel) {
    char why[256];
    if (agent_oom_protect(why, sizeof why) < 0) {
      fprintf(stderr, "agent: %s\n", why);
      return 2;
    }
  }
  if (o->cgroup) {
    char why[256];
    if (code_cgroup_load(o->cgroup, why, sizeof why) < 0) {
      fprintf(stderr, "agent: %s\n", why); /* never run code outside the memory it was given */
      return 2;
    }
  }
  if (o->seccomp) {
    char why[256];
    if (code_seccomp_load(o->seccomp, why, sizeof why) < 0) {
      fprintf(stderr, "agent: %s\n", why); /* never run code without the filter it was given */
      return 2;
    }
  }

  /* Before any code runs (the pre-started interpreter included), so only the agent holds it. */
  if (display_open() < 0)
    fprintf(stderr, "agent: no display channel: %s\n", strerror(errno)); /* calls run without */

  struct prestart ps;
  memset(&ps, 0, sizeof ps);
  ps.ctl_w = ps.note_r = -1;
  static struct preimport pre;
  if (o->preimport) {
    char why[256];
    if (preimport_parse(o->preimport, &pre, why, sizeof why) < 0) {
      fprintf(stderr, "agent: %s\n", why);
      return 2;
    }
  }
  if (o->prestart_interp) {
    char why[256];
    if (prestart_start(&ps, o->prestart_interp, o->prestart_script, o->preimport ? &pre : NULL,
                       why, sizeof why) < 0)
      fprintf(stderr, "agent: no pre-started interpreter: %s\n", why); /* calls start it */
    else
      tree_started = 1;
  }
  if (o->seed_port) {
    char why[256];
    struct warm_ctx w = {&ps, o->warm_interp, o};
    if (apply_seed(o->seed_port, o->seed_resolv, warm_up, &w, why, sizeof why) < 0) {
      fprintf(stderr, "agent: %s\n", why);
      return 2;
    }
  }

  uint8_t ready[4];
  put_u32(ready, PROTOCOL_VERSION);
  send_frame(out, T_READY, ready, sizeof ready);

  /* One request, or a session's requests one after another (the first Q says which). */
  static struct kernel kernel;
  kernel_init(&kernel);
  int session = 0;
  for (int first = 1;; first = 0) {
    uint8_t hdr[5];
    ssize_t n = read_full(in, hdr, sizeof hdr);
    if (n == 0) {
      if (session) kill_and_reap(); /* the session ended: nothing of it outlives the agent */
      return 0; /* or the host went away before asking for anything */
    }
    if (n != (ssize_t)sizeof hdr) return 3;
    uint32_t len = get_u32(hdr);
    if (hdr[4] != T_REQUEST)
      return setup_failed(out, first ? "protocol: first host frame is not Q"
                                     : "protocol: a session's next host frame is not Q");
    if (len < 1 || len > MAX_REQUEST_FRAME)
      return setup_failed(out, "protocol: Q frame length out of range");
    size_t plen = len - 1;
    uint8_t *payload = malloc(plen ? plen : 1);
    if (!payload) return setup_failed(out, "out of memory for the request");
    if (read_full(in, payload, plen) != (ssize_t)plen) return 3;

    struct request req;
    char err[256];
    if (parse_request(payload, plen, &req, err, sizeof err) < 0) return setup_failed(out, err);
    if (!first && !req.session) return setup_failed(out, "protocol: a session's Q without session");
    session = (req.session & SESSION_CALL) != 0;
    if (use_code_fs_identity(&req, err, sizeof err) < 0) return setup_failed(out, err);
    if (write_request_files(&req, err, sizeof err) < 0) {
      if (!session) return setup_failed(out, err);
      struct run_result r; /* a session survives a call whose files could not be written */
      memset(&r, 0, sizeof r);
      r.reason = R_SETUP_FAILED;
      snprintf(r.message, sizeof r.message, "%s", err);
      send_exit(out, &r, 0);
      send_frame(out, T_DONE, NULL, 0);
      free_request(&req);
      free(payload);
      continue;
    }

    if (o->own_kernel && req.clock_ms) {
      /* The VM's clock stood still while the host kept it paused (a session between calls). */
      struct timespec ts = {(time_t)(req.clock_ms / 1000), (long)(req.clock_ms % 1000) * 1000000L};
      (void)clock_settime(CLOCK_REALTIME, &ts);
    }
    uint32_t oom_before = read_oom_kills(o);
    struct run_result res;
    tree_started = 1;
    if (session && req.kernel[0]) {
      /* The session's first kernel may be the pre-started interpreter, when the host allows it
       * and a fresh kernel would have started exactly as it did; else it is discarded. */
      if (kernel.proc.pid <= 0 && (req.session & SESSION_ADOPT) && prestart_fits(&ps, &req))
        (void)prestart_adopt(&ps, req.kernel, &kernel);
      prestart_discard(&ps);
      int fresh;
      run_cell(in, out, &req, &res, &kernel, &fresh);
    } else if (prestart_fits(&ps, &req) && prestart_release(&ps, &req) == 0) {
      run_started(in, out, &req, &res, &ps.proc);
    } else {
      prestart_discard(&ps);
      run_code(in, out, &req, &res);
    }
    tree_started = kernel.proc.pid > 0;
    uint32_t oom_after = read_oom_kills(o);
    send_exit(out, &res, oom_after >= oom_before ? oom_after - oom_before : 0);
    if (res.reason != R_SPAWN_FAILED) send_return_files(out, &req);
    send_frame(out, T_DONE, NULL, 0);
    free_request(&req);
    free(payload);
    if (!session) break;
  }
  if (o->own_kernel) linger_until_host_hangs_up(in);
  return 0;
}

int main(int argc, char **argv) {
  struct agent_opts o;
  memset(&o, 0, sizeof o);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--channel") == 0 && i + 1 < argc) {
      o.channel = argv[++i];
    } else if (strcmp(argv[i], "--own-kernel") == 0) {
      o.own_kernel = 1;
    } else if (strcmp(argv[i], "--prestart") == 0 && i + 2 < argc) {
      o.prestart_interp = argv[++i];
      o.prestart_script = argv[++i];
    } else if (strcmp(argv[i], "--preimport") == 0 && i + 1 < argc) {
      o.preimport = argv[++i];
    } else if (strcmp(argv[i], "--warm") == 0 && i + 1 < argc) {
      o.warm_interp = argv[++i];
    } else if (strcmp(argv[i], "--warm-also") == 0 && i + 1 < argc) {
      /* Comma-separated absolute paths, split in place (argv is ours to modify). */
      for (char *save = NULL, *p = strtok_r(argv[++i], ",", &save); p;
           p = strtok_r(NULL, ",", &save)) {
        if (p[0] != '/' || o.warm_alsoc == (int)(sizeof o.warm_also / sizeof o.warm_also[0])) {
          fprintf(stderr, "agent: --warm-also takes up to 4 absolute paths\n");
          return 2;
        }
        o.warm_also[o.warm_alsoc++] = p;
      }
    } else if (strcmp(argv[i], "--seed") == 0 && i + 2 < argc) {
      o.seed_port = argv[++i];
      o.seed_resolv = argv[++i];
    } else if (strcmp(argv[i], "--seccomp") == 0 && i + 1 < argc) {
      o.seccomp = argv[++i];
    } else if (strcmp(argv[i], "--cgroup") == 0 && i + 1 < argc) {
      o.cgroup = argv[++i];
    } else {
      fprintf(stderr, "usage: agent [--channel PATH] [--own-kernel] [--prestart INTERP SCRIPT "
                      "[--preimport SPEC]] [--warm INTERP] [--warm-also LIST] [--seed PORT RESOLV] [--seccomp PATH] "
                      "[--cgroup DIR]\n");
      return 2;
    }
  }
  if (o.preimport && !o.prestart_interp) {
    fprintf(stderr, "agent: --preimport needs --prestart\n");
    return 2;
  }
  return agent_main(&o);
}
