"""Run by a matrix scratch env's interpreter: byte-compile each file given, raising on the first
that does not compile (the bytecode goes to a temporary directory, not beside the sources).

    python -I byte_compile.py FILE...

Prints one result line (`@@DDTREE-OVERLAY-RESULT@@` and JSON): how many files compiled.
"""

import json
import os
import py_compile
import sys
import tempfile


def main(paths):
    out = tempfile.mkdtemp()
    for i, path in enumerate(paths):
        py_compile.compile(path, cfile=os.path.join(out, "%d.pyc" % i), doraise=True)
    print("@@DDTREE-OVERLAY-RESULT@@ " + json.dumps({"compiled": len(paths)}))


if __name__ == "__main__":
    main(sys.argv[1:])
