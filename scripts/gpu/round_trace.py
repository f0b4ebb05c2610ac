"""Kept for its old command line: `python -m ddtree_overlay.bench.round_trace` does the work."""

import runpy
import sys
from pathlib import Path

# Guarded: SGLang starts its scheduler with multiprocessing's spawn, which re-imports this file
# as `__mp_main__` in the child; unguarded, the child ran the whole trace again and every engine
# failed to start ("an attempt has been made to start a new process before ... bootstrapping").
if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    runpy.run_module("ddtree_overlay.bench.round_trace", run_name="__main__")
