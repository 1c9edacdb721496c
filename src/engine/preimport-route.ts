/**
 * Which Python calls a pre-imported interpreter serves (docs/decisions/0011-preimport.md): those
 * whose code starts by importing a pre-imported package. Before that nothing of the code may run
 * that could change how a plain run would import it: the environment, files, sys.path, warnings
 * (`os.environ["OMP_NUM_THREADS"] = "1"` before `import numpy` is common). So the code's leading
 * statements must be imports, or calls and assignments on a name an earlier one of them bound to
 * a pre-imported package (`matplotlib.use("Agg")` between `import matplotlib` and `import
 * matplotlib.pyplot`): those act on modules the pre-imported interpreter has too. Anything else
 * gets a plain interpreter, which behaves the same and only lacks the head start. The scan is
 * textual and errs toward "plain": a line it does not recognise ends the leading block.
 */
import { PREIMPORT_MIN_MEMORY_MB, type Flavour } from "../backends/prestart.js";
import { topLevelPackages, type Preimport } from "../images/preimport.js";

const NAME = "[A-Za-z_][A-Za-z0-9_]*";
const DOTTED = `${NAME}(?:\\.${NAME})*`;
/** `import a.b as c, d` */
const IMPORT = new RegExp(
  `^import\\s+(${DOTTED}(?:\\s+as\\s+${NAME})?(?:\\s*,\\s*${DOTTED}(?:\\s+as\\s+${NAME})?)*)\\s*$`,
);
/** `from a.b import x as y, z` or `from a import (x, y)` or `from a import *` */
const FROM = new RegExp(`^from\\s+(${DOTTED})\\s+import\\s+(\\*|\\(?[\\w\\s,]*\\)?)\\s*$`);
/** A line of a multi-line `from x import (` block: names, commas, the closing parenthesis. */
const FROM_CONTINUED = /^[\w\s,]*\)?\s*$/;
/** A statement on a bound name: `np.random.seed(0)`, `plt.rcParams["x"] = 1`, `mpl.use("Agg")`. */
const USE = new RegExp(`^(${NAME})\\s*[.([]`);
/** A column-0 import of anything, for the scan after the leading block. */
const ANY_IMPORT = new RegExp(`^(?:import|from)\\s+(${DOTTED}(?:\\s*,\\s*${DOTTED})*)`);

const top = (dotted: string) => dotted.split(".")[0] ?? dotted;

/** The line without its comment; null when it is not one whole simple statement we can read. */
function statementOf(line: string): string | null {
  const i = line.indexOf("#");
  const s = (i >= 0 ? line.slice(0, i) : line).trimEnd();
  if (s.includes(";") || s.endsWith("\\") || s.endsWith(":")) return null;
  return s;
}

function balanced(s: string): boolean {
  const count = (c: string) => s.split(c).length - 1;
  return (
    count("(") === count(")") &&
    count("[") === count("]") &&
    count("{") === count("}") &&
    count('"') % 2 === 0 &&
    count("'") % 2 === 0
  );
}

/** What one import statement imports and which names it binds to what (name -> module). */
function importOf(statement: string): { modules: string[]; binds: Map<string, string> } | null {
  const im = IMPORT.exec(statement);
  if (im?.[1]) {
    const binds = new Map<string, string>();
    const modules = im[1].split(",").map((part) => {
      const [module = "", , alias] = part.trim().split(/\s+/);
      binds.set(alias ?? top(module), module);
      return module;
    });
    return { modules, binds };
  }
  const from = FROM.exec(statement);
  if (from?.[1]) {
    const names = from[2] ?? "";
    if (names.startsWith("(") !== names.endsWith(")")) return null;
    const binds = new Map<string, string>();
    for (const part of names.replace(/[()]/g, "").split(",")) {
      const [name, , alias] = part.trim().split(/\s+/);
      if (name && name !== "*") binds.set(alias ?? name, from[1]);
    }
    return { modules: [from[1]], binds };
  }
  return null;
}

/**
 * True when `code`'s leading statements (after a module docstring, comments and blank lines) are
 * imports and statements on names they bound to packages in `packages`, at least one of them
 * imports such a package, and no module-level import of one appears after that block.
 */
export function importsPreimportedFirst(code: string, packages: readonly string[]): boolean {
  if (packages.length === 0) return false;
  const wanted = new Set(packages);
  const lines = code.replace(/^\uFEFF/, "").split(/\r?\n/);
  const bound = new Set<string>();
  let named = false;
  let first = true;
  let i = 0;
  for (; i < lines.length; i++) {
    const raw = lines[i] ?? "";
    if (/^\s*(#.*)?$/.test(raw)) continue;
    if (first && /^("""|''')/.test(raw)) {
      // The module docstring: up to its closing quotes, then nothing else on that line.
      first = false;
      const q = raw.slice(0, 3);
      let rest: string | null = raw.slice(3);
      while (rest !== null && !rest.includes(q))
        rest = ++i < lines.length ? (lines[i] ?? "") : null;
      if (rest === null || !/^\s*(#.*)?$/.test(rest.slice(rest.indexOf(q) + 3))) return false;
      continue;
    }
    first = false;
    if (/^\s/.test(raw)) break;
    let statement = statementOf(raw);
    if (statement === null) break;
    // `from x import (a,\n b)`: gather the continuation lines.
    if (/^from\s.*\(\s*[\w\s,]*$/.test(statement)) {
      while (i + 1 < lines.length) {
        const more = statementOf(lines[++i] ?? "");
        if (more === null || !FROM_CONTINUED.test(more)) return false;
        statement += ` ${more.trim()}`;
        if (more.includes(")")) break;
      }
    }
    const imported = importOf(statement);
    if (imported) {
      for (const [name, module] of imported.binds) {
        if (wanted.has(top(module))) bound.add(name);
        else bound.delete(name);
      }
      if (imported.modules.some((m) => wanted.has(top(m)))) named = true;
      continue;
    }
    const use = USE.exec(statement);
    if (use?.[1] && bound.has(use[1]) && balanced(statement)) continue;
    break;
  }
  if (!named) return false;
  // After the leading block: a later module-level import of a pre-imported package would run
  // after the code's own statements in a plain run.
  for (; i < lines.length; i++) {
    const m = ANY_IMPORT.exec(lines[i] ?? "");
    if (m?.[1] && m[1].split(",").some((p) => wanted.has(top(p.trim())))) return false;
  }
  return true;
}

/**
 * The flavour of interpreter a call gets: "preimport" when its runtime has a pre-import, the call
 * keeps at least PREIMPORT_MIN_MEMORY_MB (the pre-imported pages count against memory_mb) and its
 * code starts by importing a pre-imported package; else "plain".
 */
export function flavourFor(
  call: { code: string; memory_mb: number },
  preimport: Preimport | undefined,
): Flavour {
  if (!preimport || call.memory_mb < PREIMPORT_MIN_MEMORY_MB) return "plain";
  return importsPreimportedFirst(call.code, topLevelPackages(preimport)) ? "preimport" : "plain";
}
