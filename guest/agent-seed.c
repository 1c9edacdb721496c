/* The seed step: see agent-seed.h. The message, after its type byte 'S', big-endian:
 *   64 bytes host entropy | u64 wall clock ms | 6 bytes MAC | u8 mode (0 none, 1 public) |
 *   4 bytes IPv4 address | u8 prefix length | 4 bytes gateway | u16 n | n bytes resolv.conf
 * The entropy is credited to the input pool (RNDADDENTROPY) and the CRNG forced to reseed
 * (RNDRESEEDCRNG), so clones of one template stop sharing RNG state; the clock is set because a
 * clone's wall clock is its template's. eth0 is configured with ioctls, not a tool: every exec on
 * this path costs tens of ms under TCG. */
#define _GNU_SOURCE
#include "agent-seed.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <net/route.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SEED_BYTES 64
#define HEADER_BYTES 90
#define MAX_RESOLV 1024
#define IFACE "eth0"

/* Reads exactly n bytes. The port reads EOF while the host side is not connected (e.g. just after
 * a restore, before the host's connection is seen): wait for it, up to ~10 s. */
static int read_exact(int fd, unsigned char *buf, size_t n) {
  size_t got = 0;
  int eofs = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
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

/* Rewrites resolv.conf in place: the guest's root is read-only, and init binds a root-owned file
 * of its own there (guest/init). O_NOFOLLOW: never a symlink the image may have put there. */
static int write_resolv(const char *path, const unsigned char *text, size_t n) {
  int fd = open(path, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
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

static void set_in(struct sockaddr *sa, const unsigned char *a) {
  struct sockaddr_in *in = (struct sockaddr_in *)sa;
  memset(in, 0, sizeof *in);
  in->sin_family = AF_INET;
  memcpy(&in->sin_addr.s_addr, a, 4);
}

static int fail(char *err, size_t errlen, const char *what) {
  snprintf(err, errlen, "seed: %s: %s", what, strerror(errno));
  return -1;
}

static int configure_eth0(const unsigned char *mac, int public, const unsigned char *addr,
                          unsigned prefix, const unsigned char *gw, char *err, size_t errlen) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return fail(err, errlen, "socket");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", IFACE);
  ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
  memcpy(ifr.ifr_hwaddr.sa_data, mac, 6);
  int rc = -1;
  if (ioctl(s, SIOCSIFHWADDR, &ifr) < 0) {
    fail(err, errlen, "set MAC");
    goto out;
  }
  if (public) {
    set_in(&ifr.ifr_addr, addr);
    if (ioctl(s, SIOCSIFADDR, &ifr) < 0) {
      fail(err, errlen, "set address");
      goto out;
    }
    uint32_t m = htonl(prefix ? ~0u << (32 - prefix) : 0);
    set_in(&ifr.ifr_netmask, (const unsigned char *)&m);
    if (ioctl(s, SIOCSIFNETMASK, &ifr) < 0) {
      fail(err, errlen, "set netmask");
      goto out;
    }
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
      fail(err, errlen, "get flags");
      goto out;
    }
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) {
      fail(err, errlen, "link up");
      goto out;
    }
    struct rtentry rt;
    memset(&rt, 0, sizeof rt);
    static const unsigned char any[4] = {0, 0, 0, 0};
    set_in(&rt.rt_dst, any);
    set_in(&rt.rt_genmask, any);
    set_in(&rt.rt_gateway, gw);
    rt.rt_flags = RTF_UP | RTF_GATEWAY;
    rt.rt_dev = (char *)IFACE;
    if (ioctl(s, SIOCADDRT, &rt) < 0) {
      fail(err, errlen, "default route");
      goto out;
    }
  }
  rc = 0;
out:
  close(s);
  return rc;
}

int apply_seed(const char *port_path, const char *resolv_path, warm_fn warm, void *ctx, char *err,
               size_t errlen) {
  struct {
    struct rand_pool_info info;
    unsigned char buf[SEED_BYTES];
  } req;
  unsigned char msg[HEADER_BYTES];
  unsigned char resolv[MAX_RESOLV];

  int port = open(port_path, O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (port < 0) return fail(err, errlen, "open port");
  unsigned char type;
  for (;;) {
    if (write(port, "W", 1) != 1 || read_exact(port, &type, 1) < 0) {
      close(port);
      return fail(err, errlen, "read message");
    }
    unsigned char arg = 0;
    if (type == 'U' && read_exact(port, &arg, 1) < 0) {
      close(port);
      return fail(err, errlen, "read message");
    }
    if (type != 'T' && type != 'R' && type != 'U') break;
    warm(ctx, type, arg);
  }
  if (type != 'S' || read_exact(port, msg, HEADER_BYTES) < 0) {
    close(port);
    errno = EPROTO;
    return fail(err, errlen, "read message");
  }
  size_t rlen = ((size_t)msg[88] << 8) | msg[89];
  if (rlen > MAX_RESOLV || read_exact(port, resolv, rlen) < 0) {
    close(port);
    errno = EPROTO;
    return fail(err, errlen, "resolv.conf");
  }
  close(port);

  memcpy(req.buf, msg, SEED_BYTES);
  memset(msg, 0, SEED_BYTES);
  int rnd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
  if (rnd < 0) return fail(err, errlen, "open /dev/urandom");
  req.info.entropy_count = SEED_BYTES * 8;
  req.info.buf_size = SEED_BYTES;
  int ok = ioctl(rnd, RNDADDENTROPY, &req) == 0 && ioctl(rnd, RNDRESEEDCRNG) == 0;
  memset(&req, 0, sizeof req);
  close(rnd);
  if (!ok) return fail(err, errlen, "reseed");

  uint64_t ms = 0;
  for (int i = 0; i < 8; i++) ms = (ms << 8) | msg[SEED_BYTES + i];
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  if (clock_settime(CLOCK_REALTIME, &ts) != 0) return fail(err, errlen, "set clock");

  const unsigned char *mac = msg + 72;
  errno = EPROTO;
  if ((mac[0] & 0x03) != 0x02) return fail(err, errlen, "MAC not locally administered unicast");
  if (msg[78] > 1) return fail(err, errlen, "network mode");
  int public = msg[78] == 1;
  if (public && (msg[83] < 1 || msg[83] > 30)) return fail(err, errlen, "prefix length");
  if (public && write_resolv(resolv_path, resolv, rlen) < 0) return fail(err, errlen, "resolv.conf");
  return configure_eth0(mac, public, msg + 79, msg[83], msg + 84, err, errlen);
}
