/* Framing and byte-level encoding of the agent protocol (docs/PROTOCOL.md). */
#ifndef AGENT_WIRE_H
#define AGENT_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* PROTOCOL_VERSION, the frame bounds (MAX_REQUEST_FRAME host -> agent, MAX_AGENT_FRAME
 * agent -> host, MAX_CHUNK per O/E frame, MAX_FILE_CONTENT per returned file, MAX_PATH_BYTES,
 * MAX_MESSAGE_BYTES), the exit reasons and file statuses: generated from the host's TypeScript
 * (src/protocol/guest-header.ts) by scripts/build-guest.mjs. */
#include "scratchrun-shared.h"

enum frame_type {
  T_READY = 'R',
  T_REQUEST = 'Q',
  T_KILL = 'K',
  T_STARTED = 'S',
  T_STDOUT = 'O',
  T_STDERR = 'E',
  T_EXIT = 'X',
  T_FILE = 'F',
  T_DONE = 'D',
  T_DISPLAY = 'Y',     /* bytes of one output on the display channel (agent-display.h) */
  T_DISPLAY_END = 'Z', /* that output's end: one byte, enum display_end */
};

/* Writes all of buf, retrying on EINTR and partial writes. 0 on success, -1 on error. */
int write_all(int fd, const void *buf, size_t len);
/* Reads until len bytes or EOF. Returns bytes read (< len only at EOF), -1 on error. */
ssize_t read_full(int fd, void *buf, size_t len);

void put_u32(uint8_t *p, uint32_t v);
void put_u64(uint8_t *p, uint64_t v);
uint32_t get_u32(const uint8_t *p);
uint64_t get_u64(const uint8_t *p);

/* Sends one frame: header then payload. Calls the host-lost handler on write failure. */
void send_frame(int fd, uint8_t type, const void *payload, size_t len);
/* Sends one frame whose payload is head followed by tail (avoids copying large contents). */
void send_frame2(int fd, uint8_t type, const void *head, size_t head_len, const void *tail,
                 size_t tail_len);

/* Called when the host channel is gone (write failed). Must not return. */
extern void (*on_host_lost)(void);

/* Bounds-checked reader over a received payload. */
struct cursor {
  const uint8_t *p;
  size_t len;
  size_t off;
};
int cur_u32(struct cursor *c, uint32_t *out);
int cur_u64(struct cursor *c, uint64_t *out);
/* A u32-length-prefixed byte string; points into the payload. */
int cur_bytes(struct cursor *c, const uint8_t **out, uint32_t *out_len);
size_t cur_left(const struct cursor *c);

#endif
