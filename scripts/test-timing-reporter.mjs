// A second reporter for node's test runner (scripts/run-tests.mjs adds it beside the one you
// read): the seconds each test file ran, as JSON ({ file: seconds }), written to its destination
// when the run ends. Files run one at a time, so a file's time is from its first event to its
// last, which is what it cost the suite (its process start aside). Every file is enqueued when
// the run starts: those events say nothing about when it ran.
export default async function* timings(source) {
  const first = new Map();
  const last = new Map();
  for await (const event of source) {
    const file = event.data?.file;
    if (!file || event.type === "test:enqueue") continue;
    const now = Date.now();
    if (!first.has(file)) first.set(file, now);
    last.set(file, now);
  }
  const seconds = {};
  for (const [file, start] of first) seconds[file] = (last.get(file) - start) / 1000;
  yield JSON.stringify(seconds);
}
