import { RUNTIMES, type RuntimeName } from "../../src/runtimes/names.js";
import { setting } from "../../src/schema/settings/read.js";

/**
 * The Python runtimes, and the one the e2e and security cases written for "a Python" run on:
 * python3.11 in `npm test` (the product page's python3.12 has its own cases there: the plot
 * example, the font cache, pre-imports, versions), each of them in turn in `npm run test:matrix`
 * (SCRATCHRUN_TEST_PYTHON), which runs every such case on every Python runtime and both backends.
 */
export const PYTHON_RUNTIMES = RUNTIMES.filter((r) => r.startsWith("python"));

function chosen(): RuntimeName {
  const name = setting("SCRATCHRUN_TEST_PYTHON", process.env);
  const found = PYTHON_RUNTIMES.find((r) => r === name);
  if (!found)
    throw new Error(
      `SCRATCHRUN_TEST_PYTHON=${name} is not a Python runtime (${PYTHON_RUNTIMES.join(", ")})`,
    );
  return found;
}

export const PY: RuntimeName = chosen();
