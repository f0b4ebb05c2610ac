"""Entry point: `python -m ddtree_overlay.reference ...` or, inside another interpreter (e.g.
SGLang's env, without the rest of ddtree_overlay installed), `python path/to/ddtree_overlay/reference ...`."""

import sys
from pathlib import Path

if __package__ in (
    None,
    "",
):  # run by path: import this folder as the top-level package `reference`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from reference.cli import main
else:
    from .cli import main

sys.exit(main())
