/* The per-VM seed step of a microVM guest (--seed): what makes each VM, clone or cold boot, its
 * own before the agent says READY. */
#ifndef AGENT_SEED_H
#define AGENT_SEED_H

#include <stddef.h>

/* Writes 'W' on the virtio-console port `port` (a snapshot template is saved while blocked
 * here), reads the host's seed message (src/backends/microvm/guest-net.ts, encodeSeed) and applies
 * it: entropy credited and the CRNG reseeded, the wall clock set, eth0's MAC set and, for network
 * "public", eth0's address, the default route and `resolv` written. 0, or -1 with err. */
int apply_seed(const char *port, const char *resolv, char *err, size_t errlen);

#endif
