/**
 * Preloaded into a server under test (NODE_OPTIONS=--import): on SIGUSR2 it makes a promise
 * rejection nothing handles, as a bug in the server would. Test-only; the server never loads it.
 */
process.on("SIGUSR2", () => {
  void Promise.reject(new Error("injected fault"));
});
