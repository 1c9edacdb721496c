/* Writing the request's files before the run and collecting return files after it. */
#define _GNU_SOURCE
#include "agent-files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent-wire.h"

/* Walks path's directory components from "/" without following symlinks (O_PATH|O_NOFOLLOW on
 * every component) and returns an fd of the parent directory; *leaf points at the last
 * component. With create, missing directories are made (0755). -1 with errno on failure:
 * ELOOP/ENOTDIR when a component is a symlink or not a directory. The path is already valid. */
static int open_parent(const char *path, int create, const char **leaf) {
  int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return -1;
  const char *p = path + 1;
  char comp[MAX_PATH_BYTES + 1];
  for (;;) {
    const char *slash = strchr(p, '/');
    if (!slash) {
      *leaf = p;
      return dir;
    }
    size_t n = (size_t)(slash - p);
    memcpy(comp, p, n);
    comp[n] = '\0';
    int next = openat(dir, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0 && errno == ENOENT && create) {
      if (mkdirat(dir, comp, 0755) < 0 && errno != EEXIST) {
        int e = errno;
        close(dir);
        errno = e;
        return -1;
      }
      next = openat(dir, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    int e = errno;
    close(dir);
    if (next < 0) {
      /* O_PATH|O_NOFOLLOW opens a symlink itself; O_DIRECTORY then fails with ENOTDIR. */
      errno = e;
      return -1;
    }
    dir = next;
    p = slash + 1;
  }
}

int write_request_files(const struct request *req, char *err, size_t errlen) {
  for (uint32_t i = 0; i < req->filec; i++) {
    const struct req_file *f = &req->files[i];
    const char *leaf;
    int dir = open_parent(f->path, 1, &leaf);
    if (dir < 0) {
      snprintf(err, errlen, "files: parent of %s: %s", f->path, strerror(errno));
      return -1;
    }
    /* A session's later call replaces what an earlier one left (the code's identity may remove
     * it, as the code could; a symlink is removed itself, never followed). The create stays
     * exclusive: whatever appears in between is refused, not written through. */
    if (req->session && unlinkat(dir, leaf, 0) < 0 && errno != ENOENT) {
      int e = errno;
      close(dir);
      snprintf(err, errlen, "files: replace %s: %s", f->path, strerror(e));
      return -1;
    }
    int fd = openat(dir, leaf, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, f->mode);
    int e = errno;
    close(dir);
    if (fd < 0) {
      snprintf(err, errlen, "files: create %s: %s", f->path, strerror(e));
      return -1;
    }
    if (write_all(fd, f->data, f->len) < 0) {
      e = errno;
      close(fd);
      snprintf(err, errlen, "files: write %s: %s", f->path, strerror(e));
      return -1;
    }
    if (close(fd) < 0) {
      snprintf(err, errlen, "files: close %s: %s", f->path, strerror(errno));
      return -1;
    }
  }
  return 0;
}

static enum file_status status_for_errno(int e) {
  if (e == ENOENT) return FS_MISSING;
  if (e == ELOOP || e == ENOTDIR || e == ENXIO) return FS_NOT_REGULAR;
  return FS_ERROR;
}

/* Reads one return file. On FS_OK, *buf holds *len bytes (caller frees). *size is st_size when
 * known. cap is the per-file cap, room what is left of the total. */
static enum file_status collect_one(const char *path, uint64_t cap, uint64_t room, uint8_t **buf,
                                    size_t *len, uint64_t *size) {
  *buf = NULL;
  *len = 0;
  *size = 0;
  const char *leaf;
  int dir = open_parent(path, 0, &leaf);
  if (dir < 0) return status_for_errno(errno);
  struct stat pre;
  if (fstatat(dir, leaf, &pre, AT_SYMLINK_NOFOLLOW) < 0) {
    int e = errno;
    close(dir);
    return status_for_errno(e);
  }
  /* Never open a device, FIFO or socket: opening can block or have side effects. */
  if (!S_ISREG(pre.st_mode)) {
    close(dir);
    return FS_NOT_REGULAR;
  }
  int fd = openat(dir, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  int e = errno;
  close(dir);
  if (fd < 0) return status_for_errno(e);
  struct stat st;
  if (fstat(fd, &st) < 0) {
    close(fd);
    return FS_ERROR;
  }
  if (!S_ISREG(st.st_mode) || st.st_ino != pre.st_ino || st.st_dev != pre.st_dev) {
    close(fd);
    return FS_NOT_REGULAR;
  }
  *size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
  if (*size > cap) {
    close(fd);
    return FS_TOO_LARGE;
  }
  if (*size > room) {
    close(fd);
    return FS_TOTAL_LIMIT;
  }
  /* cap <= MAX_FILE_CONTENT (checked when parsing), so this allocation is bounded. A file may
   * grow between fstat and read: read at most cap + 1 bytes to notice. */
  size_t want = (size_t)cap + 1;
  uint8_t *b = malloc(want);
  if (!b) {
    close(fd);
    return FS_ERROR;
  }
  ssize_t n = read_full(fd, b, want);
  close(fd);
  if (n < 0) {
    free(b);
    return FS_ERROR;
  }
  if ((uint64_t)n > cap) {
    free(b);
    *size = (uint64_t)n;
    return FS_TOO_LARGE;
  }
  if ((uint64_t)n > room) {
    free(b);
    *size = (uint64_t)n;
    return FS_TOTAL_LIMIT;
  }
  *buf = b;
  *len = (size_t)n;
  *size = (uint64_t)n;
  return FS_OK;
}

void send_return_files(int out_fd, const struct request *req) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < req->retc; i++) {
    const char *path = req->rets[i];
    size_t plen = strlen(path);
    uint64_t room = req->max_total > total ? req->max_total - total : 0;
    uint8_t *buf;
    size_t len;
    uint64_t size;
    enum file_status st = collect_one(path, req->max_file, room, &buf, &len, &size);
    if (st == FS_OK) total += len;
    /* str path | u8 status | u64 size | u32 content length, then content */
    uint8_t head[4 + MAX_PATH_BYTES + 1 + 8 + 4];
    size_t h = 0;
    put_u32(head, (uint32_t)plen);
    h += 4;
    memcpy(head + h, path, plen);
    h += plen;
    head[h++] = (uint8_t)st;
    put_u64(head + h, size);
    h += 8;
    put_u32(head + h, (uint32_t)len);
    h += 4;
    send_frame2(out_fd, T_FILE, head, h, buf, len);
    free(buf);
  }
}
