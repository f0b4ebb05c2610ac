"""Kept for its old command line: `python -m ddtree_overlay.bench.round_trace` does the work."""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
runpy.run_module("ddtree_overlay.bench.round_trace", run_name="__main__")
