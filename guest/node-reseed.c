/* scratchrun-reseed.node: the native addon guest/prestart.js loads into the pre-started node
 * (docs/decisions/0003-microvm.md, "Pre-started node").
 *
 * Every clone of a snapshot template resumes the same node process, with the same state in its
 * two random number generators:
 *   - OpenSSL's DRBGs (crypto.randomBytes, randomUUID, getRandomValues, key generation), seeded
 *     while node starts;
 *   - V8's per-isolate generator, from which every context seeds its Math.random on first use.
 * reseed() is called once per call, after the hand-over and before the code runs: it reseeds the
 * OpenSSL primary DRBG from the kernel (already reseeded by the agent for this VM) with fresh
 * bytes as additional input, so every DRBG derived from it reseeds before its next output, and
 * sets a fresh seed on the isolate's generator.
 *
 * Neither reseed is reachable from JavaScript; both functions are exported by the node binary
 * (OpenSSL's API, and V8's internal Isolate and RandomNumberGenerator, whose mangled names are
 * spelled out below). The addon is linked -z now and loaded RTLD_NOW: if this node does not export
 * one of them, loading fails before the snapshot, the interpreter is not pre-started, and calls
 * start a fresh node (test/e2e/node-start.test.ts holds that clones draw different numbers). */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>

/* Node-API (js_native_api.h), the four calls used here. */
typedef struct napi_env__ *napi_env;
typedef struct napi_value__ *napi_value;
typedef struct napi_callback_info__ *napi_callback_info;
typedef napi_value (*napi_callback)(napi_env, napi_callback_info);
int napi_create_function(napi_env, const char *, size_t, napi_callback, void *, napi_value *);
int napi_set_named_property(napi_env, napi_value, const char *, napi_value);
int napi_get_undefined(napi_env, napi_value *);
int napi_throw_error(napi_env, const char *, const char *);

/* OpenSSL: mixes buf into the primary DRBG's reseed, which also draws new entropy from the OS. */
int RAND_add(const void *buf, int num, double randomness);

/* V8: v8::Isolate::GetCurrent(), v8::internal::Isolate::random_number_generator() (the public
 * v8::Isolate* is the internal Isolate*), v8::base::RandomNumberGenerator::SetSeed(int64_t). */
void *_ZN2v87Isolate10GetCurrentEv(void);
void *_ZN2v88internal7Isolate23random_number_generatorEv(void *isolate);
void _ZN2v84base21RandomNumberGenerator7SetSeedEl(void *rng, int64_t seed);

enum { OPENSSL_BYTES = 32, V8_BYTES = 8 };

static napi_value reseed(napi_env env, napi_callback_info info) {
  (void)info;
  unsigned char buf[OPENSSL_BYTES + V8_BYTES];
  size_t got = 0;
  while (got < sizeof buf) {
    ssize_t n = getrandom(buf + got, sizeof buf - got, 0);
    if (n <= 0) {
      napi_throw_error(env, NULL, "scratchrun reseed: getrandom failed");
      return NULL;
    }
    got += (size_t)n;
  }
  if (RAND_add(buf, OPENSSL_BYTES, OPENSSL_BYTES) != 1) {
    napi_throw_error(env, NULL, "scratchrun reseed: RAND_add failed");
    return NULL;
  }
  void *isolate = _ZN2v87Isolate10GetCurrentEv();
  void *rng = isolate ? _ZN2v88internal7Isolate23random_number_generatorEv(isolate) : NULL;
  if (!rng) {
    napi_throw_error(env, NULL, "scratchrun reseed: no V8 isolate");
    return NULL;
  }
  int64_t seed;
  memcpy(&seed, buf + OPENSSL_BYTES, sizeof seed);
  _ZN2v84base21RandomNumberGenerator7SetSeedEl(rng, seed);
  explicit_bzero(buf, sizeof buf);
  napi_value undefined;
  napi_get_undefined(env, &undefined);
  return undefined;
}

napi_value napi_register_module_v1(napi_env env, napi_value exports);
napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  napi_value fn;
  if (napi_create_function(env, "reseed", 6, reseed, NULL, &fn) != 0 ||
      napi_set_named_property(env, exports, "reseed", fn) != 0)
    return NULL;
  return exports;
}
