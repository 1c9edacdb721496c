/* The per-VM seed step of a microVM guest (--seed): what makes each VM, clone or cold boot, its
 * own before the agent says READY. */
#ifndef AGENT_SEED_H
#define AGENT_SEED_H

#include <stddef.h>

/* Called for each warm-up request the host sends before the seed: kind 'T' (run what a call
 * runs), 'R' (a cheaper rehearsal, for a clone made while calls are running) or 'U' (run the
 * template's also-warmed interpreter number `arg`, see agent.c --warm-also). */
typedef void (*warm_fn)(void *ctx, int kind, unsigned arg);

/* Writes 'W' on the virtio-console port `port` (a snapshot template is saved while blocked
 * here) and reads what the host sends: 'T', 'R' or 'U' and one byte (a clone about to be pooled: run
 * warm() so the call's code paths are translated in this QEMU, then 'W' again) any number of
 * times, then 'S'
 * and the seed message (src/backends/microvm/guest-net.ts, encodeSeed), which it applies: entropy
 * credited and the CRNG reseeded, the wall clock set, eth0's MAC set and, for network "public",
 * eth0's address, the default route and `resolv` written. 0, or -1 with err. */
int apply_seed(const char *port, const char *resolv, warm_fn warm, void *ctx, char *err,
               size_t errlen);

#endif
