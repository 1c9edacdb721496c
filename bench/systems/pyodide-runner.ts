// Runs one piece of Python in a fresh Pyodide instance, then exits: what a per-call Pyodide
// sandbox costs. Runs under Node and under Deno unchanged. argv: <pyodide dir> <code>.
import { pathToFileURL } from "node:url";

interface PyodideLike {
  setStdout(o: { batched: (s: string) => void }): void;
  runPython(code: string): unknown;
}

const [dir, code] = process.argv.slice(2);
if (!dir || code === undefined) {
  process.stderr.write("usage: pyodide-runner <pyodide dir> <code>\n");
  process.exit(2);
}
const mod = (await import(pathToFileURL(`${dir}/pyodide.mjs`).href)) as {
  loadPyodide(o: { indexURL: string }): Promise<PyodideLike>;
};
const py = await mod.loadPyodide({ indexURL: `${dir}/` });
let out = "";
py.setStdout({ batched: (s) => (out += `${s}\n`) });
py.runPython(code);
process.stdout.write(out);
