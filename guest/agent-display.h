/* The display channel (docs/decisions/0017-outputs.md): what the code shows beside its streams
 * (matplotlib figures, display(), a session cell's last expression) comes to the agent on an
 * abstract unix socket, one connection per output, and goes to the host in order with stdout and
 * stderr.
 *
 * The agent binds the socket once, before any code runs, so nothing else can take its name (an
 * abstract name lives in the sandbox's own network namespace, or the microVM's own kernel). The
 * code connects, writes one output, shuts its side down and waits for the agent to close the
 * connection. Accepting a connection, the agent first forwards what stdout and stderr hold at
 * that moment (the writer flushed them before connecting), so the output lands after what was
 * printed before it; then it forwards the connection's bytes as `Y` frames and ends the output
 * with a `Z` frame, and closes the connection: the writer's display() returns only then, so what
 * it prints next lands after the output. The agent never parses an output: the host does
 * (src/engine/outputs.ts), treating every byte as hostile.
 *
 * Bounds (the generated header, from LIMITS.outputs): at most MAX_DISPLAYS outputs are forwarded
 * per call, each at most MAX_DISPLAY_BYTES, all together at most MAX_DISPLAY_TOTAL; an output past
 * one of them is read and discarded and its `Z` says so. */
#ifndef AGENT_DISPLAY_H
#define AGENT_DISPLAY_H

#include <stdint.h>

/* The socket's abstract name: a leading NUL, these bytes, then '_' up to the whole sun_path (107
 * bytes after the NUL). node 20 pads an abstract name with NULs to the whole sun_path while node 24
 * and Python use its length: a name that fills sun_path is one address to all three.
 * guest/python/scratchrun_display.py and guest/session.js connect to it. */
#define DISPLAY_SOCKET "scratchrun-display"

/* The `Z` frame's one byte: the output was forwarded whole; it went past a bound (what was
 * forwarded of it, if anything, is to be dropped); it never ended (its writer died mid-output). */
enum display_end { DISPLAY_WHOLE = 0, DISPLAY_OVER = 1, DISPLAY_CUT = 2 };

/* Binds and listens on the socket. 0, or -1 when it cannot (calls then run without outputs). */
int display_open(void);

/* One call's outputs. */
struct display_run {
  int conn;        /* the output being read, or -1 */
  uint32_t count;  /* outputs begun in this call */
  uint64_t total;  /* bytes forwarded in this call */
  uint64_t record; /* bytes of the current output read so far */
  int over;        /* the current output is past a bound */
};

void display_begin(struct display_run *d);

/* The fd supervise() polls for the channel: the current connection, else the listening socket
 * (-1 without a channel). */
int display_fd(const struct display_run *d);

/* The polled fd is readable: accepts a connection (calling drain(ctx) first, which forwards what
 * the streams hold) or forwards what the current one has. */
void display_ready(struct display_run *d, int host_out, uint8_t *buf, void (*drain)(void *),
                   void *ctx);

/* The call is over. With the code's tree dead, the current output and those still waiting are
 * read to their end where they have one (their writers cannot write more); otherwise (a session's
 * cell ended and its interpreter lives on) the current one is cut off and those waiting stay for
 * the next cell. */
void display_finish(struct display_run *d, int host_out, uint8_t *buf, int tree_dead);

#endif
