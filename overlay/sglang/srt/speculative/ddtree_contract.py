"""What the DDTree payload expects of SGLang's DFlash internals, checked without a GPU.

The DDTree worker subclasses ``DFlashWorkerV2`` and reads private members of it and of
its draft/verify inputs. Each release family's ``ddtree_compat`` declares a ``CONTRACT``;
``contract_problems(CONTRACT)`` checks it against the installed SGLang by introspection
(signatures, dataclass fields, assignments in ``__init__``) and returns one line per
mismatch. ``ddtree-overlay matrix`` runs it in every release's interpreter on CPU.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from typing import Dict, List


def contract_problems(contract: Dict[str, Dict[str, object]]) -> List[str]:
    problems: List[str] = []
    for target, wants in contract.items():
        try:
            obj = _resolve(target)
        except (ImportError, AttributeError) as error:
            problems.append(f"{target}: not found ({error})")
            continue
        problems += _check_params(target, obj, wants.get("params", ()))
        problems += _check_fields(target, obj, wants.get("fields", ()))
        problems += _check_members(target, obj, wants.get("members", ()))
        problems += _check_assigned(target, obj, wants.get("assigned", ()))
        problems += _check_reads(target, obj, wants.get("reads_subset_of"))
    return problems


def _resolve(target: str):
    module_name, _, qualname = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in filter(None, qualname.split(".")):
        obj = getattr(obj, part)
    return obj


def _check_params(target, obj, names) -> List[str]:
    if not names:
        return []
    params = inspect.signature(obj).parameters
    return [f"{target}: no parameter `{n}`" for n in names if n not in params]


def _check_fields(target, obj, names) -> List[str]:
    if not names:
        return []
    fields = {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()
    return [f"{target}: no dataclass field `{n}`" for n in names if n not in fields]


def _check_members(target, obj, names) -> List[str]:
    return [f"{target}: no member `{n}`" for n in names if not hasattr(obj, n)]


def _check_assigned(target, obj, names) -> List[str]:
    """Instance attributes: assigned as ``self.<name> =`` somewhere in the class body."""
    if not names:
        return []
    source = inspect.getsource(obj)
    return [
        f"{target}: never assigns `self.{n}`"
        for n in names
        if not re.search(rf"self\.{re.escape(n)}\s*(:[^=]+)?=[^=]", source)
    ]


def _check_reads(target, obj, spec) -> List[str]:
    """Attributes ``param.X`` that ``obj`` reads must all exist on the class we pass."""
    if not spec:
        return []
    param, provider = spec
    cls = _resolve(provider)
    reads = set(re.findall(rf"\b{param}\.(\w+)", inspect.getsource(obj)))
    names = {f.name for f in dataclasses.fields(cls)} | set(dir(cls))
    return [f"{target} reads `{param}.{r}`, which {provider} lacks" for r in sorted(reads - names)]
