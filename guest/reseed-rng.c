/*
 * reseed-rng PORT: one-shot reseed of the guest kernel RNG for a VM restored from a snapshot.
 * Reads 64 bytes of host entropy from the virtio-console port PORT, credits them to the input
 * pool (RNDADDENTROPY) and forces the CRNG to reseed now (RNDRESEEDCRNG), so clones restored from
 * the same memory image stop sharing RNG state before any user code runs. Exit 0 on success.
 */
#include <fcntl.h>
#include <linux/random.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define SEED_BYTES 64

int main(int argc, char **argv) {
  struct {
    struct rand_pool_info info;
    unsigned char buf[SEED_BYTES];
  } req;
  size_t got = 0;
  int port, rnd;

  if (argc != 2) return 2;
  port = open(argv[1], O_RDONLY | O_CLOEXEC);
  if (port < 0) return 3;
  while (got < SEED_BYTES) {
    ssize_t n = read(port, req.buf + got, SEED_BYTES - got);
    if (n <= 0) return 4;
    got += (size_t)n;
  }
  close(port);
  rnd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
  if (rnd < 0) return 5;
  req.info.entropy_count = SEED_BYTES * 8;
  req.info.buf_size = SEED_BYTES;
  if (ioctl(rnd, RNDADDENTROPY, &req) != 0) return 6;
  if (ioctl(rnd, RNDRESEEDCRNG) != 0) return 7;
  memset(&req, 0, sizeof req);
  close(rnd);
  return 0;
}
