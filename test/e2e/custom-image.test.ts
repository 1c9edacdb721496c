import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { CUSTOM_CONFIG, CUSTOM_IMAGES_DIR, customImage, EXTRAS } from "../helpers/custom-image.js";
import { textOf } from "../helpers/mcp-client.js";
import { serverForSuite } from "../helpers/suite.js";

// A server on the operator's image (test/helpers/custom-image.ts), called through MCP on each
// backend: every runtime uses its extra (the microVM boots a root disk made from that image).
before(async () => {
  await customImage();
});

for (const backend of TEST_BACKENDS) {
  describe(`operator-defined image [${backend}]`, () => {
    const h = serverForSuite(backend, {
      SCRATCHRUN_IMAGES: CUSTOM_IMAGES_DIR,
      SCRATCHRUN_IMAGE_CONFIG: CUSTOM_CONFIG,
      // Its templates are this image's: kept, each would take the default image's slot in the
      // store the other suites share (one file per slot), and they would build theirs again.
      SCRATCHRUN_TEMPLATE_CACHE: "off",
    });

    test("bash: the extra Debian package's program is on PATH", async () => {
      const { s } = await h.exec({
        runtime: "bash",
        code: `command -v ${EXTRAS.debian}; echo '{"a":[1,2,3]}' | jq '.a | add'`,
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.equal(s.stdout, "/usr/bin/jq\n6\n");
    });

    test("node20: the npm package loads with require() and with import, from any file", async () => {
      const cjs = await h.exec({
        runtime: "node20",
        code: `const isNumber = require("${EXTRAS.npm.name}");\nconsole.log(isNumber(5), isNumber("x"), require.resolve("${EXTRAS.npm.name}"));`,
      });
      assert.equal(cjs.s.exit_reason, "ok", cjs.s.stderr);
      assert.match(
        cjs.s.stdout,
        /^true false \/usr\/local\/lib\/scratchrun-npm\/node_modules\/is-number\/index\.js\n$/,
      );
      const esm = await h.exec({
        runtime: "node20",
        code: `import isNumber from "${EXTRAS.npm.name}";\nconsole.log("esm", isNumber(7));\nconst lib = await import("/tmp/lib/check.mjs");\nconsole.log("from /tmp", lib.default);`,
        files: {
          "/tmp/lib/check.mjs": `import n from "${EXTRAS.npm.name}";\nexport default n("12");\n`,
        },
      });
      assert.equal(esm.s.exit_reason, "ok", esm.s.stderr);
      assert.equal(esm.s.stdout, "esm true\nfrom /tmp true\n");
    });

    test("python3.11: the Debian python3-* package imports", async () => {
      const { s } = await h.exec({
        runtime: "python3.11",
        code: `import ${EXTRAS.python311.module}\nprint(${EXTRAS.python311.module}.tabulate([["x", 1]], headers=["k", "v"], tablefmt="github"))`,
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.match(s.stdout, /^\| k {3}\| +v \|/);
    });

    test("python3.12: the wheel imports at its version", async () => {
      const { s } = await h.exec({
        runtime: "python3.12",
        code: `import importlib.metadata, ${EXTRAS.wheel.name}\nprint(${EXTRAS.wheel.name}.greet(), importlib.metadata.version("${EXTRAS.wheel.name}"))`,
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.equal(s.stdout, `${EXTRAS.wheel.answer} ${EXTRAS.wheel.version}\n`);
    });

    test("the extra files are there, root's and read-only to the code", async () => {
      const { s } = await h.exec({
        runtime: "bash",
        code: `cd ${EXTRAS.files.target}; cat greeting.txt nested/n.csv; stat -c '%U %a' greeting.txt; touch x 2>/dev/null && echo writable || echo read-only`,
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      // Host root is "root" in the guest, and unmapped ("nobody") in the jail's user namespace.
      assert.equal(
        s.stdout,
        `${EXTRAS.files.contents["greeting.txt"]}${EXTRAS.files.contents["nested/n.csv"]}${backend === "namespace" ? "nobody" : "root"} 644\nread-only\n`,
      );
    });

    test("scratchrun_runtimes and the tool description name what the operator added", async () => {
      const result = await h.client.callTool({ name: "scratchrun_runtimes", arguments: {} });
      const text = textOf(result as Parameters<typeof textOf>[0]);
      assert.match(text, /^node20: v20\.\d+\.\d+; packages: is-number 7\.0\.0$/m);
      assert.match(text, /^bash: 5\.[^;]*; packages: jq \S+$/m);
      assert.match(text, /^python3\.12: 3\.12\.\d+; packages: .*scratchrun_fixture 1\.0\.0/m);
      assert.match(
        text,
        /^added by this server's operator: bash \(Debian packages\): jq \S+; python3\.11 \(Debian packages\): python3-tabulate \S+; python3\.12: scratchrun_fixture 1\.0\.0; node20 \(npm packages: require\(\) or import from any file\): is-number 7\.0\.0; files: \/usr\/local\/share\/scratchrun-test \(\d+ bytes\)$/m,
      );
      const { tools } = await h.client.listTools();
      const exec = tools.find((t) => t.name === "scratchrun_exec");
      assert.match(
        exec?.description ?? "",
        /Also installed on this server: bash: jq; python3\.11: python3-tabulate; python3\.12: scratchrun_fixture; node20 \(require\(\) or import\): is-number; files: \/usr\/local\/share\/scratchrun-test\./,
      );
    });
  });
}
