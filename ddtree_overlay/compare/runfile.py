"""Read a run of the DDTree reference code (`benchmark.py --save-path`) into typed records.

The file is a `torch.save` of `run_data`:
    responses                   one dict per turn (multi-turn prompts give one per turn),
                                method key -> the SimpleNamespace `dflash_generate` /
                                `ddtree_generate` return; keys `baseline` (target-only),
                                `dflash`, `ddtree_tb<B>` per tree budget
    block_size                  the drafter's block
    draft_attn_implementation, target_attn_implementation
    args                        `vars()` of benchmark.py's arguments: model_name_or_path,
                                draft_name_or_path, dataset, tree_budget, temperature,
                                max_new_tokens, ...
A result holds `output_ids` [1, prompt + generated] (the prompt's ids first, so a turn's prompt
is `output_ids[0, :num_input_tokens]`), `num_output_tokens`, `acceptance_lengths` (per verify
round, bonus included), `time_per_output_token` and `time_to_first_token` (seconds), and more
this module does not read. The file is loaded with `weights_only=True`: plain containers,
tensors and SimpleNamespace only, never arbitrary pickled code.
"""

from __future__ import annotations

import pickle
import re
import types
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddtree_overlay.bench.arms import Arm
from ddtree_overlay.engine.errors import run_file_malformed, run_file_unreadable

METHOD_KEY = re.compile(r"^(baseline|dflash|ddtree_tb(\d+))$")
GREEDY_BELOW = 1e-5  # the reference code samples by argmax below this temperature (model/utils.py)


@dataclass(frozen=True)
class OfflineGeneration:
    """One method's generation of one turn, as the reference code recorded it."""

    tokens: tuple[int, ...]  # generated tokens (prompt excluded)
    acceptance_lengths: tuple[int, ...]  # per verify round, bonus included (all 1 for target-only)
    time_per_output_token: float  # seconds, decode only
    time_to_first_token: float  # seconds, the prefill


@dataclass(frozen=True)
class OfflineTurn:
    index: int
    prompt: tuple[int, ...]
    methods: Mapping[str, OfflineGeneration]  # method key -> generation


@dataclass(frozen=True)
class OfflineRun:
    path: Path
    target: str  # args.model_name_or_path, as recorded
    draft: str
    dataset: str
    block_size: int
    temperature: float
    max_new_tokens: int
    target_attention: str
    method_keys: tuple[str, ...]  # baseline first, then dflash, then budgets ascending
    turns: tuple[OfflineTurn, ...]

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def budgets(self) -> tuple[int, ...]:
        return tuple(int(m[2]) for key in self.method_keys if (m := METHOD_KEY.match(key)) and m[2])


def arm_of(method_key: str) -> Arm:
    """The tool's arm for a reference method key: baseline is target-only, ddtree_tb32 is B=32."""
    found = METHOD_KEY.match(method_key)
    if found is None:
        raise ValueError(f"not a reference method key: {method_key!r}")
    if found[2]:
        return Arm.ddtree(int(found[2]))
    return Arm.parse("target-only" if found[1] == "baseline" else "dflash")


def read_run(path: Path) -> OfflineRun:
    """The run saved at `path`; `RunFileInvalid` (a one-line reason) for anything else."""
    data = _load(path)
    if not isinstance(data, Mapping):
        raise run_file_malformed(path, f"it holds a {type(data).__name__}, not the run_data dict")
    missing = [k for k in ("responses", "block_size", "args", "target_attn_implementation") if k not in data]
    if missing:
        raise run_file_malformed(path, f"no key {missing[0]!r}")
    args = data["args"]
    if not isinstance(args, Mapping):
        raise run_file_malformed(path, "`args` is not a dict")
    responses = data["responses"]
    if not isinstance(responses, list) or not responses:
        raise run_file_malformed(path, "`responses` holds no turn")
    keys = _method_keys(path, responses)
    turns = tuple(_turn(path, i, response, keys) for i, response in enumerate(responses))
    return OfflineRun(
        path=path,
        target=str(_arg(path, args, "model_name_or_path", str)),
        draft=str(_arg(path, args, "draft_name_or_path", str)),
        dataset=str(args.get("dataset", "")),
        block_size=int(_field(path, data, "block_size", int)),
        temperature=float(_arg(path, args, "temperature", (int, float))),
        max_new_tokens=int(_arg(path, args, "max_new_tokens", int)),
        target_attention=str(data["target_attn_implementation"]),
        method_keys=keys,
        turns=turns,
    )


def _load(path: Path) -> Any:
    import torch

    if path.is_file() and not zipfile.is_zipfile(path):
        raise run_file_unreadable(path, "not a torch.save file (not a zip archive)")
    try:
        with torch.serialization.safe_globals([types.SimpleNamespace]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise run_file_unreadable(path, "no such file") from None
    except IsADirectoryError:
        raise run_file_unreadable(path, "it is a directory") from None
    except PermissionError:
        raise run_file_unreadable(path, "permission denied") from None
    except pickle.UnpicklingError:
        raise run_file_unreadable(
            path, "it holds objects other than tensors, plain containers and SimpleNamespace"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError) as error:
        raise run_file_unreadable(path, f"not a torch.save file ({type(error).__name__})") from None


def _method_keys(path: Path, responses: list) -> tuple[str, ...]:
    first = responses[0]
    if not isinstance(first, Mapping):
        raise run_file_malformed(path, "turn 0 is not a dict of methods")
    unknown = sorted(str(k) for k in first if not METHOD_KEY.match(str(k)))
    if unknown:
        raise run_file_malformed(path, f"unknown method {unknown[0]!r} (expected baseline, dflash, ddtree_tb<B>)")
    if "baseline" not in first:
        raise run_file_malformed(path, "turn 0 has no `baseline` (target-only) result")

    def order(key: str) -> tuple[int, int]:
        budget = METHOD_KEY.match(key)[2]  # type: ignore[index]
        return (2, int(budget)) if budget else ((0, 0) if key == "baseline" else (1, 0))

    return tuple(sorted(first, key=order))


def _turn(path: Path, index: int, response: Any, keys: tuple[str, ...]) -> OfflineTurn:
    if not isinstance(response, Mapping) or tuple(sorted(response)) != tuple(sorted(keys)):
        raise run_file_malformed(path, f"turn {index} does not hold the methods of turn 0 ({', '.join(keys)})")
    prompts, methods = set(), {}
    for key in keys:
        prompt, generation = _generation(path, f"turn {index} `{key}`", response[key])
        prompts.add(prompt)
        methods[key] = generation
    if len(prompts) != 1:
        raise run_file_malformed(path, f"turn {index}: the methods' prompts differ")
    return OfflineTurn(index=index, prompt=prompts.pop(), methods=methods)


def _generation(path: Path, where: str, result: Any) -> tuple[tuple[int, ...], OfflineGeneration]:
    fields = vars(result) if isinstance(result, types.SimpleNamespace) else result
    if not isinstance(fields, Mapping):
        raise run_file_malformed(path, f"{where} is a {type(result).__name__}, not a generation result")
    output_ids = _field(path, fields, "output_ids", object, where)
    try:
        ids = [int(t) for t in output_ids.reshape(-1).tolist()]
    except (AttributeError, TypeError, ValueError):
        raise run_file_malformed(path, f"{where}: `output_ids` is not a tensor of token ids") from None
    prompt_len = int(_field(path, fields, "num_input_tokens", int, where))
    if not 0 < prompt_len <= len(ids):
        raise run_file_malformed(path, f"{where}: num_input_tokens {prompt_len} outside its {len(ids)} ids")
    lengths = _field(path, fields, "acceptance_lengths", list, where)
    if not all(isinstance(a, int) and a >= 1 for a in lengths):
        raise run_file_malformed(path, f"{where}: acceptance lengths must be integers >= 1")
    generation = OfflineGeneration(
        tokens=tuple(ids[prompt_len:]),
        acceptance_lengths=tuple(lengths),
        time_per_output_token=float(_field(path, fields, "time_per_output_token", (int, float), where)),
        time_to_first_token=float(_field(path, fields, "time_to_first_token", (int, float), where)),
    )
    return tuple(ids[:prompt_len]), generation


def _field(path: Path, fields: Mapping, name: str, kind: Any, where: str = "the run") -> Any:
    if name not in fields:
        raise run_file_malformed(path, f"{where} has no `{name}`")
    value = fields[name]
    if kind is not object and (not isinstance(value, kind) or isinstance(value, bool)):
        raise run_file_malformed(path, f"{where}: `{name}` is a {type(value).__name__}")
    return value


def _arg(path: Path, args: Mapping, name: str, kind: Any) -> Any:
    return _field(path, args, name, kind, "`args`")
