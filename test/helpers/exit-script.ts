/**
 * One Python script whose end shows, in its output, everything code can observe of an
 * interpreter's exit: a thread's output at join, atexit, finalisers of an imported module
 * (helper.py, EXIT_HELPER), of `__main__`'s objects and of a cycle, a replaced `print`, C-level
 * stdio, the status, and an unclosed file (out.txt). Run it in a pre-started interpreter and in
 * a plain one and compare (decision 0011, "The exit").
 */
export const EXIT_HELPER = "class H:\n    def __del__(self): print('del helper')\nh = H()\n";

/** The code does not compile: the script ends before any of it runs. */
export const SYNTAX_ERROR = "x = (";

/** How a call can end: `sys.exit(3)` from a function, an exception, a non-int exit, the end. */
export const EXIT_ENDINGS = [
  "leave(3)",
  "raise ValueError('boom')",
  "sys.exit('bye')",
  "pass",
  SYNTAX_ERROR,
];

/** `head` (the code's first lines: its imports), then the script, then `ending`. */
export function exitScript(head: readonly string[], ending: string): string {
  return [
    ...head,
    "import atexit, builtins, ctypes, sys, threading, time",
    "sys.path.insert(0, '.')",
    "import helper",
    "class D:",
    "    def __init__(self, n): self.n = n",
    "    def __del__(self): print('del', self.n)",
    "def leave(code):",
    "    held = D('frame')",
    "    sys.exit(code)",
    "a = D('main')",
    "b = D('cycle'); b.me = b",
    "f = open('out.txt', 'w'); f.write('written at exit')",
    "atexit.register(print, 'atexit')",
    "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()",
    "builtins.print = lambda *a, **k: sys.stdout.write('replaced print\\n')",
    "sys.stdout.write('buffered ')",
    "ctypes.CDLL(None).printf(b'c-level\\n')",
    ending,
  ].join("\n");
}
