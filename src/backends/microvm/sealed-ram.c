/*
 * sealed-ram SIZE_BYTES: holds the RAM of a snapshot template in a memfd the host can seal.
 *
 * The template QEMU maps this memfd shared (through /proc/<this pid>/fd/N, opened by the host)
 * and boots into it; after the template is saved and killed, the host writes "seal\n" and this
 * adds F_SEAL_WRITE|GROW|SHRINK|SEAL. Clones then map the same memfd private (copy on write):
 * a sealed memfd can be opened read-write but never written through write() or a shared mapping,
 * so a compromised clone QEMU cannot change what the next clone starts from.
 *
 * Protocol on stdin/stdout, one line each: prints "ready FD" once the memfd exists; on "seal"
 * prints "sealed" (or "error ERRNO"); exits on EOF. Exit status 0 unless setup failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  char *end;
  unsigned long long size = strtoull(argv[1], &end, 10);
  if (*end || size == 0 || size > (1ULL << 40)) return 2;
  int fd = memfd_create("scratchrun-template-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
    printf("error %d\n", errno);
    return 3;
  }
  printf("ready %d\n", fd);
  fflush(stdout);
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (strcmp(line, "seal\n") != 0) continue;
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) == 0)
      printf("sealed\n");
    else
      printf("error %d\n", errno);
    fflush(stdout);
  }
  return 0;
}
