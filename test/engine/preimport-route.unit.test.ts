import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { PREIMPORT_MIN_MEMORY_MB } from "../../src/backends/prestart.js";
import { flavourFor, importsPreimportedFirst } from "../../src/engine/preimport-route.js";
import { preimportFor } from "../../src/images/preimport.js";

/**
 * The router that sends a Python call to a pre-imported interpreter (decision 0011). Its one
 * safety property: it never says "pre-imported" when a statement of the code that is not an
 * import (or a call on a name bound to a pre-imported package) runs before an import of a
 * pre-imported package, since a plain run would import it in the world that statement made. Its
 * failure mode otherwise is speed only.
 */
const PACKAGES = ["numpy", "pandas", "matplotlib"];
const route = (code: string) => importsPreimportedFirst(code, PACKAGES);

const PRODUCT =
  "import matplotlib.pyplot as plt\nimport numpy as np\nx = np.linspace(0, 10, 100)\nplt.plot(x, np.sin(x))\nplt.savefig('/tmp/plot.png')";

describe("the pre-import router", () => {
  test("calls that start by importing the stack go to a pre-imported interpreter", () => {
    for (const code of [
      PRODUCT,
      // The headless idiom: configuring an imported package between imports.
      'import numpy as np\nimport matplotlib\nmatplotlib.use("Agg")\nimport matplotlib.pyplot as plt\nx = np.arange(3)\n',
      '"""A docstring,\nover lines."""\n# a comment\n\nfrom __future__ import annotations\nimport pandas as pd\ndf = pd.DataFrame()\n',
      "from numpy import (array,\n    zeros)  # names\nprint(array([1]))\n",
      "import os, numpy as np\nnp.random.seed(0)\nimport pandas\nprint(os.getpid())\n",
      "#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\r\nimport numpy\r\nprint(numpy.pi)\r\n",
      "import pandas as pd\nimport matplotlib.pyplot as plt\ndf = pd.read_csv('sales.csv')\nplt.rcParams['font.size'] = 9\n",
    ])
      assert.equal(route(code), true, code);
  });

  test("anything that could change a later import of the stack gets a plain interpreter", () => {
    for (const code of [
      'import os\nos.environ["OMP_NUM_THREADS"] = "1"\nimport numpy\n',
      'import numpy as np\nimport os\nos.environ["MPLBACKEND"] = "svg"\nimport matplotlib.pyplot as plt\n',
      "import sys\nsys.path.insert(0, '.')\nimport numpy\n",
      "import warnings\nwarnings.simplefilter('error')\nimport pandas\n",
      "open('matplotlibrc', 'w').write('lines.linewidth: 5')\nimport matplotlib.pyplot\n",
      "import numpy as np\nx = 1\nimport pandas as pd\n",
      "import numpy as np\nx = 1\nfrom matplotlib import pyplot\n",
      "import numpy as np; import os\n",
      "import numpy as np\nimport os as np\nnp.environ['X'] = '1'\nimport pandas\n",
      "def main():\n    import numpy\nmain()\n",
      "try:\n    import numpy\nexcept ImportError:\n    pass\n",
      "print(1)",
      "import os\nimport json\n",
      "",
      '"""unterminated docstring\nimport numpy\n',
      "'single-quoted docstring'\nimport numpy\n",
      "import numpy \\\n  as np\n",
      "from . import numpy\n",
    ])
      assert.equal(route(code), false, code);
  });

  // Statements that may change how a later import behaves, none of them on a bound stack name.
  const worldChanging = fc.constantFrom(
    'os.environ["OPENBLAS_NUM_THREADS"] = "1"',
    "sys.path.insert(0, '/home/user')",
    "open('matplotlibrc', 'w').write('backend: svg')",
    "warnings.simplefilter('error')",
    "x = 1",
    "print('hi')",
    "np = __import__('os')",
    "if True: pass",
    "for i in range(1): pass",
    "with open('/tmp/x', 'w') as f: f.write('1')",
    "os.chdir('/tmp')",
  );
  const plainImport = fc.constantFrom(
    "import os",
    "import sys, json",
    "from collections import OrderedDict",
    "import warnings",
    "from __future__ import annotations",
  );
  const stackImport = fc.constantFrom(
    "import numpy as np",
    "import numpy",
    "import pandas as pd",
    "import matplotlib",
    "import matplotlib.pyplot as plt",
    "from matplotlib import pyplot as plt",
    "from numpy import array",
  );

  test("property: a world-changing statement before the first stack import means plain", () => {
    fc.assert(
      fc.property(
        fc.array(plainImport, { maxLength: 4 }),
        worldChanging,
        fc.array(fc.oneof(plainImport, worldChanging), { maxLength: 3 }),
        fc.array(stackImport, { minLength: 1, maxLength: 3 }),
        (before, change, between, stack) => {
          const code = [...before, change, ...between, ...stack, "print(1)"].join("\n");
          assert.equal(route(code), false, code);
        },
      ),
    );
  });

  test("property: imports (with the stack among them) then any body without a later stack import", () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(plainImport, stackImport), { maxLength: 4 }),
        stackImport,
        fc.array(worldChanging, { maxLength: 4 }),
        (imports, stack, body) => {
          const code = [...imports, stack, ...body].join("\n");
          assert.equal(route(code), true, code);
        },
      ),
    );
  });

  test("property: any text, any packages: an answer, never a throw", () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 400 }),
        fc.array(fc.string({ maxLength: 8 })),
        (code, p) => {
          assert.equal(typeof importsPreimportedFirst(code, p), "boolean");
        },
      ),
    );
    assert.equal(importsPreimportedFirst(PRODUCT, []), false);
  });

  test("a call keeping less than PREIMPORT_MIN_MEMORY_MB, or a runtime without a pre-import, gets a plain one", () => {
    const pre = preimportFor(
      { argv: ["/py"], version: "3.11.2", packages: { numpy: "1" } },
      "/home/user",
    );
    assert.ok(pre);
    assert.equal(
      flavourFor({ code: PRODUCT, memory_mb: PREIMPORT_MIN_MEMORY_MB }, pre),
      "preimport",
    );
    assert.equal(flavourFor({ code: PRODUCT, memory_mb: 512 }, pre), "preimport");
    assert.equal(
      flavourFor({ code: PRODUCT, memory_mb: PREIMPORT_MIN_MEMORY_MB - 1 }, pre),
      "plain",
    );
    assert.equal(flavourFor({ code: PRODUCT, memory_mb: 32 }, pre), "plain");
    assert.equal(flavourFor({ code: PRODUCT, memory_mb: 256 }, undefined), "plain");
    assert.equal(flavourFor({ code: "print(1)", memory_mb: 256 }, pre), "plain");
  });
});
