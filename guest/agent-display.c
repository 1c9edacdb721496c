/* The display channel: see agent-display.h. */
#define _GNU_SOURCE
#include "agent-display.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent-wire.h"

static int listen_fd = -1;

int display_open(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  struct sockaddr_un a;
  memset(&a, '_', sizeof a);
  a.sun_family = AF_UNIX;
  a.sun_path[0] = '\0';
  memcpy(a.sun_path + 1, DISPLAY_SOCKET, sizeof DISPLAY_SOCKET - 1);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 16) < 0) {
    close(fd);
    return -1;
  }
  listen_fd = fd;
  return 0;
}

void display_begin(struct display_run *d) {
  memset(d, 0, sizeof *d);
  d->conn = -1;
}

int display_fd(const struct display_run *d) { return d->conn >= 0 ? d->conn : listen_fd; }

static void end_output(struct display_run *d, int host_out, enum display_end how) {
  uint8_t b = (uint8_t)(d->over && how == DISPLAY_WHOLE ? DISPLAY_OVER : how);
  send_frame(host_out, T_DISPLAY_END, &b, 1);
  close(d->conn); /* the writer's wait ends: its output is placed */
  d->conn = -1;
}

/* Reads once from the current connection and forwards what the bounds allow. 1 when the output
 * ended (EOF or an error: the writer is gone), 0 when more may come, -1 when nothing is there
 * now. */
static int read_some(struct display_run *d, int host_out, uint8_t *buf) {
  ssize_t n = read(d->conn, buf, MAX_CHUNK);
  if (n < 0 && errno == EINTR) return 0;
  if (n < 0 && errno == EAGAIN) return -1;
  if (n <= 0) return 1;
  uint64_t got = (uint64_t)n;
  if (!d->over && d->record + got <= MAX_DISPLAY_BYTES && d->total + got <= MAX_DISPLAY_TOTAL) {
    send_frame(host_out, T_DISPLAY, buf, (size_t)n);
    d->total += got;
  } else {
    d->over = 1; /* read on to its end, forwarding nothing more */
  }
  d->record += got;
  return 0;
}

static void accept_one(struct display_run *d) {
  d->conn = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (d->conn < 0) return;
  d->record = 0;
  d->over = d->count >= MAX_DISPLAYS;
  d->count++;
}

void display_ready(struct display_run *d, int host_out, uint8_t *buf, void (*drain)(void *),
                   void *ctx) {
  if (listen_fd < 0) return;
  if (d->conn < 0) {
    /* What the writer printed before it connected is in the pipes now: it goes first. */
    drain(ctx);
    accept_one(d);
    return;
  }
  if (read_some(d, host_out, buf) == 1) end_output(d, host_out, DISPLAY_WHOLE);
}

/* Reads the current output to its end, if it has one now (its writer is dead or done). */
static void read_to_end(struct display_run *d, int host_out, uint8_t *buf) {
  for (;;) {
    int r = read_some(d, host_out, buf);
    if (r == 1) return end_output(d, host_out, DISPLAY_WHOLE);
    if (r < 0) return end_output(d, host_out, DISPLAY_CUT);
  }
}

void display_finish(struct display_run *d, int host_out, uint8_t *buf, int tree_dead) {
  if (listen_fd < 0) return;
  if (!tree_dead) {
    if (d->conn >= 0) end_output(d, host_out, DISPLAY_CUT);
    return;
  }
  if (d->conn >= 0) read_to_end(d, host_out, buf);
  /* Writers killed while they waited for their close: their outputs are whole in the queue. */
  for (;;) {
    accept_one(d);
    if (d->conn < 0) return;
    read_to_end(d, host_out, buf);
  }
}
