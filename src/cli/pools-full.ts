import type { Backend } from "../backends/types.js";

/**
 * Says once when every warm pool is first full, and how long after start (issue 30: readiness a
 * user can see); nothing if the backend closes first.
 */
export function logWhenPoolsFull(
  backend: Pick<Backend, "whenPoolsFull">,
  log: (afterMs: number) => void,
): void {
  void backend.whenPoolsFull().then((ms) => {
    if (ms !== null) log(ms);
  });
}
