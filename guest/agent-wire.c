/* Framing and byte-level encoding of the agent protocol (docs/PROTOCOL.md). */
#include "agent-wire.h"

#include <errno.h>
#include <unistd.h>

void (*on_host_lost)(void);

int write_all(int fd, const void *buf, size_t len) {
  const uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

ssize_t read_full(int fd, void *buf, size_t len) {
  uint8_t *p = buf;
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, p + got, len - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    got += (size_t)n;
  }
  return (ssize_t)got;
}

void put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

void put_u64(uint8_t *p, uint64_t v) {
  put_u32(p, (uint32_t)(v >> 32));
  put_u32(p + 4, (uint32_t)v);
}

uint32_t get_u32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

uint64_t get_u64(const uint8_t *p) { return ((uint64_t)get_u32(p) << 32) | get_u32(p + 4); }

static void host_lost(void) {
  if (on_host_lost) on_host_lost();
  _exit(3);
}

void send_frame2(int fd, uint8_t type, const void *head, size_t head_len, const void *tail,
                 size_t tail_len) {
  size_t total = 1 + head_len + tail_len;
  if (total > MAX_AGENT_FRAME) host_lost(); /* a bug: never send what the host must reject */
  uint8_t hdr[5];
  put_u32(hdr, (uint32_t)total);
  hdr[4] = type;
  if (write_all(fd, hdr, sizeof hdr) < 0) host_lost();
  if (head_len > 0 && write_all(fd, head, head_len) < 0) host_lost();
  if (tail_len > 0 && write_all(fd, tail, tail_len) < 0) host_lost();
}

void send_frame(int fd, uint8_t type, const void *payload, size_t len) {
  send_frame2(fd, type, payload, len, NULL, 0);
}

size_t cur_left(const struct cursor *c) { return c->len - c->off; }

int cur_u32(struct cursor *c, uint32_t *out) {
  if (cur_left(c) < 4) return -1;
  *out = get_u32(c->p + c->off);
  c->off += 4;
  return 0;
}

int cur_u64(struct cursor *c, uint64_t *out) {
  if (cur_left(c) < 8) return -1;
  *out = get_u64(c->p + c->off);
  c->off += 8;
  return 0;
}

int cur_bytes(struct cursor *c, const uint8_t **out, uint32_t *out_len) {
  uint32_t n;
  if (cur_u32(c, &n) < 0) return -1;
  if (cur_left(c) < n) return -1;
  *out = c->p + c->off;
  *out_len = n;
  c->off += n;
  return 0;
}
