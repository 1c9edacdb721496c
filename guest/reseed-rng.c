/*
 * reseed-rng PORT: one-shot reseed of a guest restored from a snapshot, run by init before the
 * agent (and so before any user code) starts.
 *
 * Writes one byte 'W' to the virtio-console port PORT (the host snapshots the template VM once it
 * sees it: the guest is then blocked right here), then reads the host's seed message:
 *   64 bytes of host entropy, u64 big-endian host wall clock in milliseconds.
 * The entropy is credited to the input pool (RNDADDENTROPY) and the CRNG is forced to reseed
 * (RNDRESEEDCRNG), so clones of one template stop sharing RNG state; the clock is set because the
 * snapshot's wall clock is the template's. Exit 0 on success.
 */
#include <fcntl.h>
#include <linux/random.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define SEED_BYTES 64
#define MSG_BYTES (SEED_BYTES + 8)

int main(int argc, char **argv) {
  struct {
    struct rand_pool_info info;
    unsigned char buf[SEED_BYTES];
  } req;
  unsigned char msg[MSG_BYTES];
  size_t got = 0;
  int port, rnd, eofs = 0;

  if (argc != 2) return 2;
  port = open(argv[1], O_RDWR | O_CLOEXEC);
  if (port < 0) return 3;
  if (write(port, "W", 1) != 1) return 4;
  while (got < MSG_BYTES) {
    ssize_t n = read(port, msg + got, MSG_BYTES - got);
    if (n < 0) return 4;
    if (n == 0) {
      /* The port reads EOF while the host side is not connected (e.g. just after a restore,
       * before the host's connection is seen): wait for it, up to ~10 s. */
      if (++eofs > 1000) return 4;
      usleep(10000);
      continue;
    }
    got += (size_t)n;
  }
  close(port);
  memcpy(req.buf, msg, SEED_BYTES);
  rnd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
  if (rnd < 0) return 5;
  req.info.entropy_count = SEED_BYTES * 8;
  req.info.buf_size = SEED_BYTES;
  if (ioctl(rnd, RNDADDENTROPY, &req) != 0) return 6;
  if (ioctl(rnd, RNDRESEEDCRNG) != 0) return 7;
  close(rnd);
  uint64_t ms = 0;
  for (int i = 0; i < 8; i++) ms = (ms << 8) | msg[SEED_BYTES + i];
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  if (clock_settime(CLOCK_REALTIME, &ts) != 0) return 8;
  memset(&req, 0, sizeof req);
  memset(msg, 0, sizeof msg);
  return 0;
}
