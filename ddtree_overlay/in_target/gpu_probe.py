"""Run by the TARGET env's interpreter for `bench`: which GPU torch sees, and torch's version.

Prints one result line (`@@DDTREE-OVERLAY-RESULT@@` and JSON); a torch that fails to import is
reported, not raised.
"""

import json


def main():
    report = {"gpu": None, "torch": None, "error": None}
    try:
        import torch

        report["torch"] = torch.__version__
        if torch.cuda.is_available():
            report["gpu"] = torch.cuda.get_device_name(0)
    except BaseException as exc:
        report["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    print("@@DDTREE-OVERLAY-RESULT@@ " + json.dumps(report))


if __name__ == "__main__":
    main()
