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
 * "load OFFSET PATH" (before "seal"): copies the data extents of the file PATH from OFFSET on into
 * the memfd at 0 (a template kept on disk, written sparse: holes stay zero pages untouched) and
 * prints "loaded" (or "error ERRNO"; EFBIG when the file holds more than the memfd).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Copies the data extents of `path` from `offset` on into fd at 0; 0 or an errno. */
static int load(int fd, unsigned long long size, unsigned long long offset, const char *path) {
  int in = open(path, O_RDONLY | O_CLOEXEC);
  if (in < 0) return errno;
  enum { CHUNK = 1 << 20 };
  char *buf = malloc(CHUNK);
  int err = buf ? 0 : ENOMEM;
  off_t pos = (off_t)offset;
  while (!err) {
    off_t data = lseek(in, pos, SEEK_DATA);
    if (data < 0) {
      if (errno != ENXIO) err = errno; /* ENXIO: no data past pos */
      break;
    }
    off_t hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0) {
      err = errno;
      break;
    }
    for (off_t at = data; at < hole && !err;) {
      size_t want = (size_t)(hole - at) < CHUNK ? (size_t)(hole - at) : CHUNK;
      ssize_t got = pread(in, buf, want, at);
      if (got <= 0) {
        err = got < 0 ? errno : EIO;
        break;
      }
      unsigned long long to = (unsigned long long)(at - (off_t)offset);
      if (to + (unsigned long long)got > size) {
        err = EFBIG;
        break;
      }
      for (ssize_t done = 0; done < got;) {
        ssize_t w = pwrite(fd, buf + done, (size_t)(got - done), (off_t)(to + (unsigned long long)done));
        if (w <= 0) {
          err = w < 0 ? errno : EIO;
          break;
        }
        done += w;
      }
      at += got;
    }
    pos = hole;
  }
  free(buf);
  close(in);
  return err;
}

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
  static char line[4200];
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "load ", 5) == 0) {
      char *rest;
      unsigned long long offset = strtoull(line + 5, &rest, 10);
      size_t n = strlen(line);
      int err = EINVAL;
      if (*rest == ' ' && n > 0 && line[n - 1] == '\n') {
        line[n - 1] = 0;
        err = load(fd, size, offset, rest + 1);
      }
      if (err)
        printf("error %d\n", err);
      else
        printf("loaded\n");
      fflush(stdout);
      continue;
    }
    if (strcmp(line, "seal\n") != 0) continue;
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) == 0)
      printf("sealed\n");
    else
      printf("error %d\n", errno);
    fflush(stdout);
  }
  return 0;
}
