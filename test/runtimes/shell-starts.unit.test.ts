import assert from "node:assert/strict";
import { test } from "node:test";
import { shellStartPaths, shellStartsNamed } from "../../src/runtimes/shell-starts.js";
import { IN_IMAGE } from "../../src/runtimes/in-image.js";

const named = (code: string) =>
  shellStartsNamed("bash", code).map((n) => shellStartPaths("bash")[n]);

test("bash's other interpreters, in the order the guest numbers them", () => {
  assert.deepEqual(shellStartPaths("bash"), [
    IN_IMAGE.node20,
    IN_IMAGE.python311,
    IN_IMAGE.python312,
  ]);
  assert.deepEqual(shellStartPaths("python3.12"), []);
});

test("a command name standing as a word starts its interpreter", () => {
  const cases: [string, string[]][] = [
    ["node -v", [IN_IMAGE.node20]],
    ["cd app && npm test", [IN_IMAGE.node20]],
    ["x=$(node -e 'console.log(1)')", [IN_IMAGE.node20]],
    ["echo hi\nnpx tsc", [IN_IMAGE.node20]],
    ["python3 -c 'print(1)'", [IN_IMAGE.python311]],
    ["pip install requests; python main.py", [IN_IMAGE.python311]],
    ["`python3 -V`", [IN_IMAGE.python311]],
    ["python3.12 x.py", [IN_IMAGE.python312]],
    ["python3 a.py | node b.js", [IN_IMAGE.node20, IN_IMAGE.python311]],
    ["{ python3.11 -V; }", [IN_IMAGE.python311]],
    [`sh -c "node x.js"`, [IN_IMAGE.node20]],
    ["eval 'python3 -V'", [IN_IMAGE.python311]],
  ];
  for (const [code, want] of cases) assert.deepEqual(named(code), want, code);
});

test("a longer name, a path, a file or plain text starts nothing", () => {
  for (const code of [
    "ls node_modules",
    "nodejs -v",
    "./node -v",
    "cat python3.txt",
    "echo python3-venv",
    "/opt/mynode/bin/node2",
    "echo done",
    "",
  ])
    assert.deepEqual(named(code), [], code);
});
