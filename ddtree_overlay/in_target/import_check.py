"""Run by the TARGET env's interpreter for `verify`: import each module the overlay added or
patched, in the order a server does, and report the first error line of each.

    python import_check.py MODULE...

The model runner first: some installs import cleanly only that way (e.g. flashinfer builds whose
optional `cuda.tile` import the model runner's import chain guards). For a module that fails
because another module is not installed, ``missing`` names that module (so the caller can tell
sglang's own missing dependencies from the overlay's faults). Also reports whether torch sees a
GPU. Prints one result line (`@@DDTREE-OVERLAY-RESULT@@` and JSON).
"""

import importlib
import json
import sys


def forget_orphans(name):
    # A failed package import drops the package but keeps the submodules it loaded; importing
    # through them again raises KeyError. Re-importing a package that did load must be avoided
    # instead: its import-time registrations (torch custom ops) refuse to run twice.
    top = name.split(".")[0]
    if top not in sys.modules:
        for loaded in [m for m in sys.modules if m.startswith(top + ".")]:
            del sys.modules[loaded]


def main(modules):
    report = {"modules": {}, "missing": {}, "gpu": None}
    try:
        importlib.import_module("sglang.srt.model_executor.model_runner")
    except BaseException:
        forget_orphans("sglang")  # each module below then reports its own error
    for name in modules:
        try:
            importlib.import_module(name)
            report["modules"][name] = None
        except BaseException as exc:
            report["modules"][name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            if isinstance(exc, ModuleNotFoundError) and exc.name:
                report["missing"][name] = exc.name
            forget_orphans(name)
    try:
        import torch

        if torch.cuda.is_available():
            report["gpu"] = torch.cuda.get_device_name(0)
    except BaseException:
        pass
    print("@@DDTREE-OVERLAY-RESULT@@ " + json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
