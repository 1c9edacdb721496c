/* Framing and byte-level encoding of the agent protocol (docs/PROTOCOL.md). */
#ifndef AGENT_WIRE_H
#define AGENT_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PROTOCOL_VERSION 1u
#define MAX_REQUEST_FRAME (64u << 20)          /* host -> agent */
#define MAX_AGENT_FRAME ((16u << 20) + 4096u)  /* agent -> host */
#define MAX_CHUNK 65536u                       /* raw bytes per O/E frame */
#define MAX_FILE_CONTENT (16u << 20)           /* per returned file, so F fits MAX_AGENT_FRAME */
#define MAX_PATH_BYTES 4000u                   /* so a 16 MiB F frame with its path still fits */
#define MAX_MESSAGE_BYTES 1024u                /* X message */

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
