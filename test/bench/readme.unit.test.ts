import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { describe, test } from "node:test";
import {
  latestResultsFile,
  renderReadme,
  renderSpeedBlock,
  RESULTS_DIR,
  SPEED_DOC,
} from "../../bench/readme.js";
import { FIGURE_DOCS, FIGURES, renderFigures } from "../../bench/doc-figures.js";
import { REPO_ROOT } from "../../bench/peers.js";
import type { BenchResults } from "../../bench/results.js";

const readme = () => readFileSync(join(REPO_ROOT, SPEED_DOC), "utf8");

/**
 * The README's speed numbers are the latest benchmark run's (issue 30): its section is rendered
 * from the newest results file in bench/results, and this fails while the two differ.
 */
describe("the README's speed section is the latest results file's", () => {
  test("README.md equals its rendering from the latest file (node dist/bench/readme.js)", () => {
    const { file, results } = latestResultsFile();
    const doc = readme();
    assert.equal(
      renderReadme(doc, results, file),
      doc,
      `${SPEED_DOC}'s speed section is not ${basename(file)}'s: run npm run build && node dist/bench/readme.js`,
    );
    assert.ok(doc.includes(`(../bench/results/${basename(file)})`), "the section links its file");
    const top = readFileSync(join(REPO_ROOT, "README.md"), "utf8");
    assert.ok(top.includes(`](${SPEED_DOC})`), "the README links the section");
  });

  test("the section changes with the file: an older run renders another table", () => {
    const { file, results } = latestResultsFile();
    const older = JSON.parse(
      readFileSync(join(RESULTS_DIR, "2026-11-30-vm.json"), "utf8"),
    ) as BenchResults;
    assert.notEqual(
      renderSpeedBlock(older, join(RESULTS_DIR, "2026-11-30-vm.json")),
      renderSpeedBlock(results, file),
    );
  });

  test("latest means the newest run by its own date, among bench results only", () => {
    const dir = mkdtempSync(join(tmpdir(), "bench-readme-"));
    try {
      const run = JSON.parse(
        readFileSync(join(RESULTS_DIR, "2026-11-30-vm.json"), "utf8"),
      ) as BenchResults;
      writeFileSync(
        join(dir, "b-old.json"),
        JSON.stringify({ ...run, date: "2026-01-01T00:00:00Z" }),
      );
      writeFileSync(
        join(dir, "a-new.json"),
        JSON.stringify({ ...run, date: "2026-06-01T00:00:00Z" }),
      );
      writeFileSync(join(dir, "cluster-latest.json"), JSON.stringify({ date: "2027-01-01" }));
      writeFileSync(join(dir, "broken.json"), "{");
      assert.equal(basename(latestResultsFile(dir).file), "a-new.json");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("a README without the section is an error, not a silent pass", () => {
    const { file, results } = latestResultsFile();
    assert.throws(() => renderReadme("# no section\n", results, file), /bench:speed/);
  });
});

/**
 * The measured figures the docs' prose quotes (memory of an idle clone, a pre-imported jail's
 * charge) are the latest run's too (issue 25: numbers in docs generated from bench/results).
 */
describe("the docs' measured figures are the latest results file's", () => {
  for (const doc of FIGURE_DOCS)
    test(`${doc} equals its rendering from the latest file (node scripts/gen-docs.mjs)`, () => {
      const { file, results } = latestResultsFile();
      const text = readFileSync(join(REPO_ROOT, doc), "utf8");
      assert.match(text, /<!-- bench:[a-z-]+ -->/, `${doc} quotes no figure`);
      assert.equal(
        renderFigures(text, results, file),
        text,
        `${doc} quotes figures that are not ${basename(file)}'s: run npm run build && node scripts/gen-docs.mjs`,
      );
    });

  test("every figure the code knows is quoted somewhere, and a figure follows its file", () => {
    const docs = FIGURE_DOCS.map((d) => readFileSync(join(REPO_ROOT, d), "utf8")).join("\n");
    for (const name of Object.keys(FIGURES))
      assert.ok(docs.includes(`<!-- bench:${name} -->`), name);
    const { file, results } = latestResultsFile();
    const edited = {
      ...results,
      cost: { ...results.cost, idleVms: { ...results.cost.idleVms!, rssMbEach: 1.5 } },
    };
    const line = "a clone: <!-- bench:idle-vm -->old<!-- /bench:idle-vm -->.";
    assert.match(renderFigures(line, edited, file), /-->1\.5 MB RSS \//);
  });

  test("an unknown figure, or one the run did not measure, is an error", () => {
    const { file, results } = latestResultsFile();
    assert.throws(
      () => renderFigures("<!-- bench:nope -->1<!-- /bench:nope -->", results, file),
      /unknown benchmark figure/,
    );
    const { idleVms: _gone, ...cost } = results.cost;
    assert.throws(
      () =>
        renderFigures("<!-- bench:idle-vm -->1<!-- /bench:idle-vm -->", { ...results, cost }, file),
      /did not measure the figure idle-vm/,
    );
  });
});
