"""Run by the TARGET env's interpreter for `bench`, before any engine starts: is FA3 there for
the engines that may run it?

    python fa3_probe.py ENGINES_JSON

ENGINES_JSON maps a name to ``{"kwargs": {sglang.Engine keywords}, "env": {NAME: value}}``: the
engines that ask for SGLang's default attention backend. Prints one result line
(`@@DDTREE-OVERLAY-RESULT@@` and JSON): ``flash_ops``, whether sgl_kernel has its FA3 extension,
found without importing sgl_kernel (whose import loads its CUDA libraries), None where the env
has no sgl_kernel; and only where it lacks FA3, ``backends`` (name -> the backend SGLang picks)
and ``errors`` (name -> why it could not be told), each engine's backend resolved as
`sglang.Engine` resolves it in its own process: `ServerArgs(**kwargs)` once SGLang's plugins
are loaded, under the engine's environment variables.
"""

import importlib.machinery
import importlib.util
import json
import os
import sys

RESULT_MARK = "@@DDTREE-OVERLAY-RESULT@@ "


def has_flash_ops():
    """Whether sgl_kernel has ``flash_ops`` (FA3); None without sgl_kernel."""
    kernel = importlib.util.find_spec("sgl_kernel")  # a top-level name: found, not imported
    if kernel is None or not kernel.submodule_search_locations:
        return None
    locations = list(kernel.submodule_search_locations)
    return importlib.machinery.PathFinder.find_spec("sgl_kernel.flash_ops", locations) is not None


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def resolved_backends(engines: dict) -> tuple:
    """(name -> attention backend, name -> error) for ``engines`` (as ENGINES_JSON gives them)."""
    try:
        from sglang.srt.plugins import load_plugins
        from sglang.srt.server_args import ServerArgs

        load_plugins()  # as sglang.Engine does first: a plugin may hook ServerArgs
    except Exception as exc:
        return {}, dict.fromkeys(engines, _first_line(exc))
    backends, errors = {}, {}
    for name, engine in engines.items():
        overrides = {key: str(value) for key, value in (engine.get("env") or {}).items()}
        saved = {key: os.environ.get(key) for key in overrides}
        os.environ.update(overrides)
        try:
            backends[name] = ServerArgs(**engine["kwargs"]).attention_backend
        except Exception as exc:
            errors[name] = _first_line(exc)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return backends, errors


def main(argv: list) -> None:
    engines = json.loads(argv[1]) if len(argv) > 1 else {}
    report = {"flash_ops": has_flash_ops(), "backends": {}, "errors": {}}
    if report["flash_ops"] is False and engines:
        report["backends"], report["errors"] = resolved_backends(engines)
    print(RESULT_MARK + json.dumps(report))


if __name__ == "__main__":
    main(sys.argv)
