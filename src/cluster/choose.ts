/**
 * Where a call goes: power of two choices, preferring a worker with a warm sandbox for the call's
 * runtime. Pure (the randomness is passed in), so the rule is tested by properties.
 *
 * Two workers drawn at random, not the single best: every replica sees the same (slightly stale)
 * statuses, and "the best" would send every replica's next calls to the same worker at once.
 */
export interface Candidate {
  id: string;
  /** Warm sandboxes for this call's runtime, as last reported. */
  warm: number;
  /** Calls it could still take by its last status: free slots plus free queue places. */
  room: number;
  /** How busy it is, 0 (idle) and up: (active + queued + sent since its status) / slots. */
  load: number;
}

/** Which of two is better for a call: warm first, then the lighter load, then `a`. */
export function better(a: Candidate, b: Candidate): Candidate {
  const aw = a.warm > 0;
  const bw = b.warm > 0;
  if (aw !== bw) return aw ? a : b;
  return b.load < a.load ? b : a;
}

/**
 * Picks a worker for a call: among workers with room (by their last status), two at random and
 * the better of them; when none has room by those (already stale) statuses, the least loaded,
 * whose own admission then decides (a refusal sends the call to the next). Null only when every
 * worker was tried. `random()` returns [0, 1) like Math.random; `exclude` holds workers this call
 * was already refused by.
 */
export function choose(
  candidates: readonly Candidate[],
  random: () => number,
  exclude: ReadonlySet<string> = new Set(),
): Candidate | null {
  const untried = candidates.filter((c) => !exclude.has(c.id));
  const open = untried.filter((c) => c.room > 0);
  if (open.length === 0)
    return untried.reduce<Candidate | null>(
      (m, c) => (m === null || c.load < m.load ? c : m),
      null,
    );
  if (open.length === 1) return open[0]!;
  const i = Math.min(open.length - 1, Math.floor(random() * open.length));
  let j = Math.min(open.length - 2, Math.floor(random() * (open.length - 1)));
  if (j >= i) j++;
  return better(open[i]!, open[j]!);
}
