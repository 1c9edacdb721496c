/*
 * reseed-rng PORT RESOLV: one-shot setup of a guest, run by init before the agent (and so before
 * any user code) starts. Every VM passes through it: a snapshot template is saved while blocked
 * here, a clone continues from here after restore, a cold-booted VM waits here until the host
 * knows which call (and network) it serves.
 *
 * Writes one byte 'W' to the virtio-console port PORT, then reads the host's seed message
 * (src/backends/microvm/guest-net.ts, encodeSeed), big-endian:
 *   64 bytes host entropy | u64 wall clock ms | 6 bytes MAC | u8 mode (0 none, 1 public) |
 *   4 bytes IPv4 address | u8 prefix length | 4 bytes gateway | u16 n | n bytes resolv.conf
 * The entropy is credited to the input pool (RNDADDENTROPY) and the CRNG is forced to reseed
 * (RNDRESEEDCRNG), so clones of one template stop sharing RNG state; the clock is set because the
 * snapshot's wall clock is the template's. With mode public the resolv.conf text replaces RESOLV
 * (never followed if it is a symlink).
 *
 * Prints one line for init to apply with `ip`, every field formatted here from binary:
 *   "<mac> none"  or  "<mac> public <a.b.c.d>/<prefix> <gateway>"
 * Exit 0 on success.
 */
#include <fcntl.h>
#include <linux/random.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define SEED_BYTES 64
#define HEADER_BYTES 90
#define MAX_RESOLV 1024

/* Reads exactly n bytes. The port reads EOF while the host side is not connected (e.g. just after
 * a restore, before the host's connection is seen): wait for it, up to ~10 s. */
static int read_exact(int fd, unsigned char *buf, size_t n) {
  size_t got = 0;
  int eofs = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0) return -1;
    if (r == 0) {
      if (++eofs > 1000) return -1;
      usleep(10000);
      continue;
    }
    got += (size_t)r;
  }
  return 0;
}

static int write_resolv(const char *path, const unsigned char *text, size_t n) {
  (void)unlink(path);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(fd, text + off, n - off);
    if (w <= 0) {
      close(fd);
      return -1;
    }
    off += (size_t)w;
  }
  return close(fd);
}

int main(int argc, char **argv) {
  struct {
    struct rand_pool_info info;
    unsigned char buf[SEED_BYTES];
  } req;
  unsigned char msg[HEADER_BYTES];
  unsigned char resolv[MAX_RESOLV];

  if (argc != 3) return 2;
  int port = open(argv[1], O_RDWR | O_CLOEXEC);
  if (port < 0) return 3;
  if (write(port, "W", 1) != 1) return 4;
  if (read_exact(port, msg, HEADER_BYTES) < 0) return 4;
  size_t rlen = ((size_t)msg[88] << 8) | msg[89];
  if (rlen > MAX_RESOLV) return 9;
  if (read_exact(port, resolv, rlen) < 0) return 4;
  close(port);

  memcpy(req.buf, msg, SEED_BYTES);
  int rnd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
  if (rnd < 0) return 5;
  req.info.entropy_count = SEED_BYTES * 8;
  req.info.buf_size = SEED_BYTES;
  if (ioctl(rnd, RNDADDENTROPY, &req) != 0) return 6;
  if (ioctl(rnd, RNDRESEEDCRNG) != 0) return 7;
  close(rnd);
  memset(&req, 0, sizeof req);

  uint64_t ms = 0;
  for (int i = 0; i < 8; i++) ms = (ms << 8) | msg[SEED_BYTES + i];
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  if (clock_settime(CLOCK_REALTIME, &ts) != 0) return 8;

  const unsigned char *mac = msg + 72;
  if ((mac[0] & 0x03) != 0x02) return 10; /* not a locally administered unicast MAC */
  printf("%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]);
  if (msg[78] == 1) {
    const unsigned char *a = msg + 79, *g = msg + 84;
    if (msg[83] < 1 || msg[83] > 30) return 11;
    if (write_resolv(argv[2], resolv, rlen) < 0) return 12;
    printf(" public %u.%u.%u.%u/%u %u.%u.%u.%u\n", a[0], a[1], a[2], a[3], msg[83], g[0], g[1],
           g[2], g[3]);
  } else if (msg[78] == 0) {
    printf(" none\n");
  } else {
    return 13;
  }
  memset(msg, 0, SEED_BYTES);
  return fflush(stdout) == 0 ? 0 : 14;
}
