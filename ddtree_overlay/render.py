"""The only module that writes to the terminal: data on stdout, diagnostics on stderr."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from ddtree_overlay.engine.progress import QUIET, Progress
from ddtree_overlay.engine.result import Result

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress



class _Console(Console):
    """A console whose reader may leave (`| head`): the closed pipe silences it, and the command
    goes on to finish its work and exit with its own code (rich's own default exits 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        _drop(self.file)


stdout = _Console(markup=False, highlight=False, emoji=False, soft_wrap=True)
stderr = _Console(stderr=True, markup=False, highlight=False, emoji=False, soft_wrap=True)

_DIFF_STYLES = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))


def _reader_may_leave(write: Callable[..., None]) -> Callable[..., None]:
    """Output written to `sys.stdout` directly, with `_Console`'s manners."""

    @functools.wraps(write)
    def guarded(*args: Any, **kwargs: Any) -> None:
        try:
            write(*args, **kwargs)
        except BrokenPipeError:
            drop_stdout()

    return guarded


def drop_stdout() -> None:
    _drop(sys.stdout)
    stdout.quiet = True


def _drop(stream: IO[str]) -> None:
    """Point ``stream``'s descriptor at /dev/null: nothing, not even the flush at exit, writes
    to the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)


@_reader_may_leave
def emit(result: Result, *, json_out: bool) -> None:
    if json_out:
        sys.stdout.write(json.dumps(result.envelope(), sort_keys=True, indent=2) + "\n")
        sys.stdout.flush()
    elif result.status != "error":
        _VIEWS[result.command[0]](result.data)
    _diagnostics(result)


@_reader_may_leave
def emit_demo_step(result: Result) -> None:
    if result.command == ("demo",):
        how = "created" if result.data.get("created") else "reused"
        stdout.print(f"scratch env with stock sglang: {result.data['env']} ({how})")
        return
    stdout.print(f"\n== ddtree-overlay {result.command[0]} ==", style="bold")
    emit(result, json_out=False)


def _diagnostics(result: Result) -> None:
    for message in result.messages:
        stderr.print(f"note: {message}")
    for issue in result.issues:
        prefix = "error" if result.status in ("error", "failed") else "warning"
        stderr.print(f"{prefix}: {issue.message}", style="red" if prefix == "error" else "yellow")
    if result.status == "error":
        for detail in result.data.get("details", ()):
            stderr.print(f"  {detail}")
        if result.data.get("hint"):
            stderr.print(f"\nhint: {result.data['hint']}")


def _status_view(data: Mapping[str, Any]) -> None:
    env, sglang, runtime = data["env"], data["sglang"], data["runtime"]
    record = sglang["record"]
    lines = [
        f"env:          {env['path']} (python {env['python_version']}"
        f"{', venv' if env['is_venv'] else ''})",
        f"sglang:       {sglang['version']} at {sglang['location']} ({sglang['install_kind']}"
        f"{', commit ' + sglang['commit'] if sglang['commit'] else ''})",
        f"RECORD:       {record['files']} files, {len(record['modified'])} modified, "
        f"{len(record['missing'])} missing" if record["present"] else "RECORD:       absent",
        f"torch:        {runtime['torch'] or 'not installed'}"
        f"{' (CUDA ' + runtime['torch_cuda'] + ')' if runtime['torch_cuda'] else ''}",
        f"sgl_kernel:   {runtime['sgl_kernel'] or 'not installed'}"
        f"{' links ' + ', '.join(runtime['sgl_kernel_cudart']) if runtime['sgl_kernel_cudart'] else ''}",
        f"driver CUDA:  {runtime['driver_cuda'] or 'no nvidia-smi'}",
        _patch_set_line(data["patch_set"]),
        _overlay_line(data["overlay"]),
    ]
    lines += [f"  {path}: {state}" for path, state in data["overlay"].get("files", {}).items()]
    lines += [f"  note: {note}" for note in data["overlay"].get("notes", ())]
    lines += [f"  modified vs RECORD: {path}" for path in record["modified"]]
    lines += [f"  missing vs RECORD: {path}" for path in record["missing"]]
    if "git" in data:
        lines += _git_lines(data["git"])
    stdout.print("\n".join(lines))


def _patch_set_line(match: Mapping[str, Any]) -> str:
    if match["id"] is None:
        return f"patch set:    none ({match['reason']})"
    return f"patch set:    {match['id']} ({match['versions']})"


def _overlay_line(overlay: Mapping[str, Any]) -> str:
    applied = f" {overlay['applied']}" if overlay.get("applied") else ""
    return f"overlay:      {overlay['state']}{applied}"


def _git_lines(git: Mapping[str, Any]) -> list[str]:
    lines = [f"git checkout: {git['checkout']} vs installed {git['installed']}"]
    for key, label in (
        ("only_installed", "only installed"),
        ("only_in_checkout", "only in checkout"),
        ("differing", "differs"),
    ):
        lines.append(f"  {label}: {len(git[key])}")
        lines += [f"    {path}" for path in git[key]]
    return lines


def _apply_view(data: Mapping[str, Any]) -> None:
    if data.get("already_applied"):
        stdout.print(f"{data['patch_set']}: already applied, nothing to do")
        return
    verb = "applied" if data["applied"] else "would apply (check only, nothing written)"
    stdout.print(f"{verb} {data['patch_set']}: {len(data['files'])} file(s)")
    for file in data["files"]:
        hunks = ", ".join(
            f"hunk #{h['number']} at line {h['line']}" + (f" (offset {h['offset']:+d})" if h["offset"] else "")
            for h in file["hunks"]
        )
        stdout.print(f"  {file['kind']:<9} {file['path']}" + (f": {hunks}" if hunks else ""))


def _diff_view(data: Mapping[str, Any]) -> None:
    if "diff" not in data:
        stdout.print("\n".join(_stat_lines(data["files"])))
        added = sum(f["added"] for f in data["files"])
        removed = sum(f["removed"] for f in data["files"])
        stdout.print(f" {len(data['files'])} file(s) changed, {added} insertions(+), {removed} deletions(-)")
        return
    if not stdout.is_terminal or stdout.no_color:
        sys.stdout.write(data["diff"])
        sys.stdout.flush()
        return
    for line in data["diff"].splitlines():
        style = next((s for prefix, s in _DIFF_STYLES if line.startswith(prefix)), "")
        stdout.print(Text(line, style=style))


def _stat_lines(files: list[Mapping[str, Any]]) -> list[str]:
    """`git diff --stat`'s columns: paths padded to the longest, counts right-aligned."""
    path_width = max((len(f["path"]) for f in files), default=0)
    added = [f"+{f['added']}" for f in files]
    removed = [f"-{f['removed']}" for f in files]
    added_width = max(map(len, added), default=0)
    removed_width = max(map(len, removed), default=0)
    return [
        f" {f['path']:<{path_width}} | {plus:>{added_width}} {minus:>{removed_width}}  {f['kind']}"
        for f, plus, minus in zip(files, added, removed, strict=True)
    ]


def _rollback_view(data: Mapping[str, Any]) -> None:
    if not data["files"]:
        return
    stdout.print(f"rolled back {data['patch_set']}: {len(data['files'])} file(s) restored")
    for path in data["files"]:
        stdout.print(f"  {path}")
    for path in data.get("saved_edits", ()):
        stdout.print(f"  your edit was saved to {path}")


def _recover_view(data: Mapping[str, Any]) -> None:
    stdout.print(f"overlay: {data['overlay']}")


def _refresh_view(data: Mapping[str, Any]) -> None:
    stdout.print(f"refreshed {data['manifest']}")
    for file in data["files"]:
        stdout.print(f"  {file['path']}: {file['pre_sha256'] or 'new'} -> {file['post_sha256']}")


def _demo_view(data: Mapping[str, Any]) -> None:
    stdout.print(f"\ndemo finished; the scratch env is pristine again: {data['env']}")


def _verify_view(data: Mapping[str, Any]) -> None:
    imports = data["imports"]
    failed = [name for name, error in imports.items() if error]
    # each failing module's error is an issue, printed once on stderr
    stdout.print(f"imports: {len(imports) - len(failed)}/{len(imports)} modules import in the env")
    stdout.print(f"GPU:     {data['gpu'] or 'none'}")
    stdout.print(f"smoke:   {data['smoke']}")
    for name, arm in data.get("arms", {}).items():
        if not arm["ok"]:
            stdout.print(f"  {name:<12} FAILED  {arm['error']}")
            continue
        accept = arm["acceptance_length"]
        stdout.print(
            f"  {name:<12} ok  {arm['tok_per_s']:.0f} tok/s"
            + (f"  acceptance length {accept:.2f}" if accept is not None else "")
            + (f"  same as target-only: {arm['identical']} prompts" if "identical" in arm else "")
        )
        for d in arm.get("divergences", []):
            margin = "unknown" if d["margin"] is None else f"{d['margin']:.3f}"
            verdict = "within bf16 noise" if d["explained"] else "NOT explained"
            stdout.print(
                f"    prompt {d['prompt']} token {d['index']}: {d['got']} for {d['expected']},"
                f" top1-top2 margin {margin} ({verdict})"
            )
    for verdict in (data.get("summary") or {}).get("sampling", []):
        stdout.print(f"  {verdict['text']}")  # the sampled-law tests and their power


@contextmanager
def arm_progress(arms: int, *, enabled: bool) -> Iterator[Callable[[Mapping[str, Any]], None]]:
    """A line per GPU decode arm on stderr, and the engine starting now."""
    with progress(enabled=enabled) as shown:
        shown.begin(arms)
        started = 0

        def on_arm(event: Mapping[str, Any]) -> None:
            nonlocal started
            if event.get("event") == "start":
                started += 1
                first = " (the first one compiles kernels)" if started == 1 else ""
                place = f"{started} of {arms}" if started <= arms else f"{started}: a failed arm's fallback"
                shown.step(f"starting the {event['arm']} engine, {place}{first}")
                return
            outcome = "ok" if event.get("ok") else f"failed: {event.get('error')}"
            shown.done(f"  {event['arm']}: {outcome}")

        yield on_arm


def _bench_view(data: Mapping[str, Any]) -> None:
    if data.get("dry_run"):
        plan = data["plan"]
        repeats = plan.get("repeats", 1)
        primed = any(run.get("primer") for run in plan["engines"])
        engines = f"{len(plan['engines']) - primed} engines" + (
            f" ({len(plan['groups'])} groups x {repeats} engines each"
            + (", target-only's waves once)" if any(g["name"] == "target-only" for g in plan["groups"]) else ")")
            if repeats > 1
            else ""
        ) + (" after an untimed primer" if primed else "")
        stdout.print(
            f"bench plan ({plan['setting']}, {plan['max_new_tokens']} new tokens): "
            f"{engines}, ~{plan['estimated_minutes']:g} GPU minutes estimated"
        )
        for i, run in enumerate(plan["engines"], 1):
            cut = "" if run["expected_to_fit"] else "  (expected to be cut by --max-minutes)"
            if run.get("primer"):
                name, repeat = f"primer ({run['group']})", "untimed   " if repeats > 1 else ""
            else:
                name, repeat = run["group"], f"repeat {run['repeat']}  " if repeats > 1 else ""
            stdout.print(f"  {i:>2}. {name:<22} {repeat}{run['cells']} cells  ~{run['estimated_s']} s{cut}")
        backends = (f"{entry['text']} ({', '.join(entry['groups'])})" for entry in plan["attention_backends"])
        stdout.print(f"attention backend: {', '.join(backends)}")
        _state_memory_lines(plan)
        stdout.print(f"results would go to {data['out']}")
        return
    if "bench" in data:
        stdout.print(f"bench: {data['bench']}")
        return
    stdout.print(data["table"])
    for line in data.get("recommendation") or ():
        stdout.print(line)
    stdout.print(f"\nwrote {', '.join(data['files'])}")


def _state_memory_lines(plan: Mapping[str, Any]) -> None:
    """The hybrid target's verify state per speculative arm, in the mode each runs (a dry run's plan)."""
    memory = plan.get("state_memory")
    if not memory:
        return
    stdout.print(
        f"verify recurrent state per GPU (DDTREE: {plan['hybrid_state']}, SGLANG_DDTREE_HYBRID_STATE; the others: "
        "snapshot), beside the live states:"
    )
    for group, entries in memory.items():
        for entry in entries:
            stdout.print(f"  {group:<22} {entry['text']}")
    if plan.get("capacity"):
        stdout.print(plan["capacity"])


def _repeat_text(event: Mapping[str, Any]) -> str:
    return f" (repeat {event['repeat']})" if (event.get("repeat") or 1) > 1 else ""


@contextmanager
def bench_progress(*, enabled: bool) -> Iterator[Callable[[Mapping[str, Any]], None]]:
    """The bench's cells as parts on stderr, with a line per engine start, engine and cell."""
    with progress(enabled=enabled) as shown:

        def on_event(event: Mapping[str, Any]) -> None:
            kind = event.get("event")
            if kind == "plan":
                shown.begin(event["cells"])
                shown.step(f"{event['engines']} engine(s) to start, {event['cells']} cell(s) to decode")
            elif kind == "start":
                estimate = f", ~{event['est_start_s']:.0f} s" if event.get("est_start_s") else ""
                shown.step(f"starting engine {event['arm']}{_repeat_text(event)}{estimate}")
            elif kind == "cell":
                if event.get("skipped"):
                    outcome = f"skipped ({event['skipped']})"
                elif event.get("ok"):
                    outcome = f"{event.get('tok_per_s') or 0:.0f} tok/s"
                else:
                    outcome = f"FAILED: {event.get('error')}"
                shown.done(f"  {event['arm']}{_repeat_text(event)}: {outcome}")
                shown.step(f"engine {event['arm']}{_repeat_text(event)}: decoding")
            elif kind == "engine" and not event.get("skipped"):
                start = f", started in {event['start_s']:.0f} s" if event.get("start_s") else ""
                outcome = "ok" if event.get("ok") else f"FAILED: {event.get('error')}"
                shown.log(f"engine {event['arm']}{_repeat_text(event)}: {outcome}{start}")
            elif kind == "reference":
                outcome = "ok" if event.get("ok") else f"failed: {event.get('error')}"
                shown.log(f"  offline reference {event['key']}: {outcome}")

        yield on_event


def _matrix_view(data: Mapping[str, Any]) -> None:
    for cell in data["cells"]:
        style = "red" if cell["status"] in data["failing_statuses"] else ""
        note = f"  {cell['details'][0]}" if cell["details"] and style else ""
        stdout.print(Text(f"{cell['release']:<14} {cell['status']:<16} {cell['seconds']:>6.1f} s{note}", style=style))
    stdout.print(f"\nwrote {data['out']}/matrix.json and {data['out']}/matrix.md ({data['seconds']:.0f} s)")


class _Live:
    """`Progress` on a terminal: a live line (spinner, step, bar, count, time) above which
    finished parts stay printed."""

    def __init__(self, live: RichProgress) -> None:
        self._live = live
        self._task = live.add_task("", total=None, detail="")

    def begin(self, total: int | None) -> None:
        self._live.update(self._task, total=total)

    def step(self, text: str) -> None:
        self._live.update(self._task, description=text, detail="")

    def detail(self, text: str) -> None:
        self._live.update(self._task, detail=_shortened(text, 60))

    def log(self, text: str) -> None:
        self._live.console.print(text)

    def done(self, text: str) -> None:
        self.log(text)
        self._live.advance(self._task)


class _Lines:
    """`Progress` when stderr is not a terminal: one plain line per step, detail and part, each
    step stamped with the seconds since the job began."""

    def __init__(self) -> None:
        self._started = time.monotonic()

    def begin(self, total: int | None) -> None: ...

    def step(self, text: str) -> None:
        self.log(f"[{time.monotonic() - self._started:5.0f} s] {text}")

    def detail(self, text: str) -> None:
        self.log(f"          {text}")

    def log(self, text: str) -> None:
        stderr.print(text)

    def done(self, text: str) -> None:
        self.log(text)


def _shortened(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


@contextmanager
def progress(*, enabled: bool) -> Iterator[Progress]:
    """A `Progress` on stderr: live on a terminal, plain lines when piped, silent when disabled.

    Live, stdout is routed above the display only while stdout is that terminal too; stdout
    redirected to a file keeps its data.
    """
    if not enabled:
        yield QUIET
        return
    if not stderr.is_terminal:
        yield _Lines()
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as RichProgress

    columns = (
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TextColumn("{task.fields[detail]}", style="dim"),
    )
    with RichProgress(
        *columns, console=stderr, transient=True, redirect_stdout=sys.stdout.isatty()
    ) as live:
        yield _Live(live)


def _compare_view(data: Mapping[str, Any]) -> None:
    from ddtree_overlay.compare.report import markdown_table

    if "compare" in data:
        stdout.print(f"compare: {data['compare']}")
        return
    stdout.print(markdown_table(data), end="")
    stdout.print("wrote " + ", ".join(data["files"]))
    if data["plot_skipped"]:
        stderr.print(data["plot_skipped"])


_VIEWS: Mapping[str, Callable[[Mapping[str, Any]], None]] = {
    "status": _status_view,
    "apply": _apply_view,
    "diff": _diff_view,
    "rollback": _rollback_view,
    "recover": _recover_view,
    "manifest-refresh": _refresh_view,
    "demo": _demo_view,
    "verify": _verify_view,
    "bench": _bench_view,
    "matrix": _matrix_view,
    "compare": _compare_view,
}
