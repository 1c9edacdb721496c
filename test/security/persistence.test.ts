import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { py, securityServer, SECURITY_BACKENDS, type SecurityServer } from "./harness.js";
import { PY } from "../helpers/pythons.js";

/**
 * SEC-FRESH beyond files: kernel objects one call leaves (SysV shared memory and message queues,
 * /dev/shm, an abstract unix socket, a background listener) are gone in the next call.
 */
const plant = py(
  "import ctypes, os, socket, subprocess",
  "libc = ctypes.CDLL(None, use_errno=True)",
  "print('shm', libc.shmget(0x5352, 4096, 0o1666))",
  "print('msg', libc.msgget(0x5352, 0o1666))",
  "open('/dev/shm/sr-marker', 'w').write('m')",
  "s = socket.socket(socket.AF_UNIX); s.bind('\\0sr-abstract'); s.listen()",
  "subprocess.Popen(['python3', '-c', 'import socket,time; s=socket.socket(socket.AF_UNIX); s.bind(\"\\\\0sr-daemon\"); s.listen(); time.sleep(600)'], start_new_session=True)",
  "import time; time.sleep(0.3)",
  "print('planted')",
);
const look = py(
  "import ctypes, os, socket",
  "libc = ctypes.CDLL(None, use_errno=True)",
  "print('shm', libc.shmget(0x5352, 0, 0))",
  "print('msg', libc.msgget(0x5352, 0))",
  "print('devshm', os.listdir('/dev/shm'))",
  "for name in ('sr-abstract', 'sr-daemon'):",
  "    try:",
  "        socket.socket(socket.AF_UNIX).connect('\\0' + name); print(name, 'CONNECTED')",
  "    except OSError as e: print(name, e.errno)",
);

for (const backend of SECURITY_BACKENDS) {
  describe(`security: persistence [${backend}]`, () => {
    let s: SecurityServer;
    before(async () => {
      s = await securityServer(backend, {}, [PY]);
    });
    after(async () => s.close());

    test("SEC-FRESH: SysV IPC, /dev/shm and abstract sockets do not survive the call", async () => {
      const first = await s.run({ runtime: PY, code: plant });
      assert.match(first.stdout, /^shm \d+$/m, first.stdout + first.stderr);
      assert.match(first.stdout, /^msg \d+$/m);
      assert.match(first.stdout, /planted/);
      const control = await s.run({ runtime: PY, code: `${plant}\n${look}` });
      assert.match(
        control.stdout,
        /sr-abstract CONNECTED/,
        "the probe sees objects when they exist",
      );
      const next = await s.run({ runtime: PY, code: look });
      assert.equal(
        next.stdout,
        "shm -1\nmsg -1\ndevshm []\nsr-abstract 111\nsr-daemon 111\n",
        next.stderr,
      );
    });
  });
}
