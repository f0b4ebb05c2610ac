"""The Typer app: every verb is a thin function over one engine call.

Adding a verb: write its engine function (returning a `Result`), add a view in `render.py`,
and add a command here that calls `_run` with it.

Each verb imports its engine modules when it runs, not when this module loads, so `--help`
and `status` pay only for what they use (the whole tool takes ~0.7 s of CPU to import).

One module past 500 lines: Typer builds each verb's `--help` from its function's signature,
and `bench` alone declares some forty options; the verbs stay side by side so every flag of the
tool is read in one place.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ddtree_overlay.commands.verify import SMOKE_NEW_TOKENS, SMOKE_PROMPTS
from ddtree_overlay.engine.errors import exit_code_table
from ddtree_overlay.fixture_paths import PAIRS

if TYPE_CHECKING:
    from ddtree_overlay.engine.envprobe import EnvInfo
    from ddtree_overlay.engine.result import Result

# what a shell reports for a process that SIGPIPE ended (128 + 13): the reader left mid-job
EXIT_READER_LEFT = 141

app = typer.Typer(
    name="ddtree-overlay",
    help="Bring the DDTree patch set into an installed SGLang, and take it out byte for byte.",
    epilog="\b\nExit codes:\n" + exit_code_table(),
    pretty_exceptions_show_locals=False,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

EnvOption = Annotated[
    Path, typer.Option("--env", help="virtualenv root or python executable of the target env")
]
JsonOption = Annotated[bool, typer.Option("--json", help="print one JSON result envelope")]
PatchSetOption = Annotated[
    Optional[Path],  # noqa: UP045 - Typer reads this annotation at runtime on Python 3.10 too
    typer.Option("--patch-set", help="a manifest to use instead of the bundled ones"),
]
ReferenceDirOption = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option(
        "--reference-dir",
        exists=True,
        file_okay=False,
        help="offline reference results made beforehand (`python -m ddtree_overlay.reference.batch DIR`: dflash.json, "
        "ddtree-b<B>.json, eagle3.json for the same prompts): bench compares acceptance with them instead of running "
        "the reference beside the sweep; verify --preset checks acceptance against them",
    ),
]


def _run(command: tuple[str, ...], json_out: bool, call: Callable[[], Result]) -> None:
    """The one place an `OverlayError` becomes output and an exit code."""
    from ddtree_overlay import render
    from ddtree_overlay.engine.errors import OverlayError
    from ddtree_overlay.engine.result import error_result

    try:
        result = call()
    except OverlayError as error:
        result = error_result(command, error)
    render.emit(result, json_out=json_out)
    raise typer.Exit(result.exit_code)


def _probe(env: Path, **how: Any) -> EnvInfo:
    from ddtree_overlay.engine.envprobe import probe_env

    return probe_env(env, **how)


def _preset_names(text: str) -> tuple[str, ...]:
    from ddtree_overlay.bench import check_presets

    names = tuple(name for name in text.split(",") if name)
    unknown = [name for name in names if name not in check_presets.PRESETS]
    if unknown or not names:
        raise ValueError(f"expected presets among {', '.join(check_presets.PRESETS)}, got {text!r}")
    return names


def _parsed(parse: Callable[[str], Any]) -> Callable[[str | None], Any]:
    """A Typer callback: ``parse`` the text (None passes through), ValueError as a usage error."""

    def callback(text: str | None) -> Any:
        if text is None:
            return None
        try:
            return parse(text)
        except ValueError as error:
            raise typer.BadParameter(str(error)) from None

    return callback


def _number_list(kind: type, minimum: float) -> Callable[[str | None], Any]:
    """"4,8,16" -> (4, 8, 16), each at least ``minimum``."""

    def parse(text: str) -> Any:
        from ddtree_overlay.bench.arms import number_list

        return number_list(text, kind, minimum)

    return _parsed(parse)


def _adaptive_budgets(text: str | None) -> Any:
    from ddtree_overlay.bench.arms import BudgetPolicy

    return _parsed(lambda value: BudgetPolicy.parse_adaptive(value).adaptive)(text)


def _budget_schedule(text: str | None) -> Any:
    from ddtree_overlay.bench.arms import BudgetPolicy

    return _parsed(lambda value: BudgetPolicy.parse_schedule(value).schedule)(text)


def _choice(choices: Callable[[], Sequence[str]]) -> Callable[[str], str]:
    """A callback accepting one of ``choices()``, asked for when the option is parsed."""

    def check(value: str) -> str:
        if value not in choices():
            raise typer.BadParameter(f"expected one of {', '.join(choices())}, got {value!r}")
        return value

    return check


def _baseline_backends(value: str) -> str:
    try:
        _bench_attention().baseline_backends(value)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    return value


def _bench_settings() -> Any:
    from ddtree_overlay.bench import settings

    return settings


def _bench_plan() -> Any:
    from ddtree_overlay.bench import plan

    return plan


def _bench_attention() -> Any:
    from ddtree_overlay.bench import attention

    return attention


def _model_dir(path: Optional[Path]) -> Optional[Path]:  # noqa: UP045
    """A model directory as SGLang loads one: a usage error before any engine starts, where a
    wrong path would otherwise fail every engine of a sweep in turn."""
    if path is not None:
        if not path.is_dir():
            raise typer.BadParameter(f"{path} is not a directory")
        if not (path / "config.json").is_file():
            raise typer.BadParameter(f"{path} holds no config.json: not a model directory")
    return path


def _acceptance_curve(path: Optional[Path]) -> Optional[Path]:  # noqa: UP045
    """The curve read at parse time: a bad file is a usage error before anything is written."""
    if path is not None:
        try:
            _load_curve(path)
        except ValueError as error:
            raise typer.BadParameter(str(error)) from None
    return path


def _load_curve(path: Optional[Path]) -> Any:  # noqa: UP045
    from ddtree_overlay.bench.acceptance_curve import load_curve

    return None if path is None else load_curve(path)


@app.command()
def status(
    env: EnvOption,
    git_checkout: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--git-checkout", help="compare this sglang git checkout with the install"),
    ] = None,
    patch_set: PatchSetOption = None,
    rehash: Annotated[
        bool,
        typer.Option(
            "--rehash",
            help="hash every file in sglang's RECORD again (by default a file whose size and "
            "times are unchanged keeps the hash it had)",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Describe ENV: sglang, runtime, matching patch set, overlay state."""
    from ddtree_overlay.commands.status import status as status_of

    record = "full" if rehash else "cached"
    _run(
        ("status",),
        json_out,
        lambda: status_of(_probe(env, record=record), manifest=patch_set, git_checkout=git_checkout),
    )


@app.command()
def apply(
    env: EnvOption,
    check: Annotated[bool, typer.Option("--check", help="plan and check only; write nothing")] = False,
    patch_set: PatchSetOption = None,
    json_out: JsonOption = False,
) -> None:
    """Apply the matching patch set to ENV in one transaction."""
    from ddtree_overlay.commands.apply import apply as apply_patch_set

    _run(("apply",), json_out, lambda: apply_patch_set(_probe(env), manifest=patch_set, check=check))


@app.command()
def diff(
    env: EnvOption,
    stat: Annotated[bool, typer.Option("--stat", help="per-file line counts only")] = False,
    patch_set: PatchSetOption = None,
    json_out: JsonOption = False,
) -> None:
    """Show what apply would change, or what the applied overlay changed."""
    from ddtree_overlay.commands.diff import diff as diff_env

    _run(("diff",), json_out, lambda: diff_env(_probe(env), manifest=patch_set, stat=stat))


@app.command()
def rollback(
    env: EnvOption,
    force: Annotated[
        bool, typer.Option("--force", help="restore edited files too, saving the edits aside")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Restore every file the overlay touched in ENV, byte for byte."""
    from ddtree_overlay.commands.rollback import rollback as rollback_env

    _run(("rollback",), json_out, lambda: rollback_env(_probe(env), force=force))


@app.command()
def recover(env: EnvOption, json_out: JsonOption = False) -> None:
    """Finish or undo a transaction that was interrupted in ENV."""
    from ddtree_overlay.commands.recover import recover as recover_env

    _run(("recover",), json_out, lambda: recover_env(_probe(env)))


@app.command()
def verify(
    env: EnvOption,
    import_only: Annotated[
        bool, typer.Option("--import-only", help="import the patched modules only (the default)")
    ] = False,
    smoke: Annotated[
        bool, typer.Option("--smoke", help="also decode target-only, DFLASH and DDTREE on the GPU")
    ] = False,
    pair: Annotated[
        str,
        typer.Option(
            "--pair",
            callback=_choice(lambda: tuple(PAIRS)),
            help="bundled fixture pair whose prompts (and, without --target/--draft, models) decode: "
            "dense (Qwen3) or hybrid (Qwen3.5-layout Gated DeltaNet)",
        ),
    ] = "dense",
    target: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--target", callback=_model_dir, help="target model dir (default: the --pair fixture's)"),
    ] = None,
    draft: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--draft", callback=_model_dir, help="DFlash drafter dir (default: the --pair fixture's)"),
    ] = None,
    budget: Annotated[int, typer.Option("--budget", min=1, help="DDTREE budget for the smoke")] = 15,
    prompts: Annotated[
        int, typer.Option("--prompts", min=1, max=64, help="held-out fixture prompts decoded at once")
    ] = SMOKE_PROMPTS,
    max_new_tokens: Annotated[
        int, typer.Option("--max-new-tokens", min=1, help="new tokens per prompt")
    ] = SMOKE_NEW_TOKENS,
    preset: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--preset",
            callback=_parsed(_preset_names),
            help="GPU acceptance presets instead of the smoke, comma-separated (a wrong name lists them)",
        ),
    ] = None,
    only: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--only", help="with --preset: only these arms (comma-separated; empty: all)"),
    ] = None,
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", file_okay=False, help="with --preset: where arms.jsonl and summary.json go"),
    ] = None,
    reference_dir: ReferenceDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Import the applied overlay in ENV's interpreter; with --smoke, decode on its GPU."""
    from ddtree_overlay import render
    from ddtree_overlay.bench import check_presets, checks
    from ddtree_overlay.commands.verify import GpuChecks
    from ddtree_overlay.commands.verify import verify as verify_env

    if import_only and (smoke or preset):
        raise typer.BadParameter("--import-only and --smoke (or --preset) exclude each other")
    presets = preset or ()
    arms = tuple(name for name in (only or "").split(",") if name)
    known = {arm.name for arm in check_presets.preset_arms(presets)}
    if arms and not presets:
        raise typer.BadParameter("--only picks arms of --preset")
    if set(arms) - known:
        unknown = ", ".join(sorted(set(arms) - known))
        raise typer.BadParameter(f"--only: no arm {unknown} in {','.join(presets)} (arms: {', '.join(sorted(known))})")
    gpu = GpuChecks(
        pair=pair,
        target=target,
        draft=draft,
        budget=budget,
        prompts=prompts,
        max_new_tokens=max_new_tokens,
        presets=presets,
        only=arms,
        out=out,
        reference_dir=reference_dir,
    )
    smoke = smoke or bool(presets)
    engines = len(check_presets.preset_arms(presets, arms) if presets else checks.smoke_arms(budget))
    with render.arm_progress(engines, enabled=smoke and not json_out) as on_arm:
        _run(("verify",), json_out, lambda: verify_env(_probe(env), smoke=smoke, gpu=gpu, on_arm=on_arm))


@app.command()
def bench(
    env: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--env", help="virtualenv root or python executable of the target env (with the GPU)"),
    ] = None,
    setting: Annotated[
        str,
        typer.Option(
            "--setting",
            callback=_choice(lambda: _bench_settings().SETTINGS),
            help="fixture or hybrid (the bundled dense or Gated-DeltaNet pair, real acceptance) or "
            "qwen3-8b-random / qwen3.6-27b-random (those shapes, random weights: per-round cost only)",
        ),
    ] = "fixture",
    target: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--target", callback=_model_dir, help="target model dir (with --draft)"),
    ] = None,
    draft: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--draft", callback=_model_dir, help="DFlash drafter dir (with --target)"),
    ] = None,
    budgets: Annotated[
        str, typer.Option("--budgets", callback=_number_list(int, 1), help="DDTREE budgets B")
    ] = "4,8,16,32,64,128,256",
    batch_sizes: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--batch-sizes",
            callback=_number_list(int, 1),
            help="concurrent requests per wave (default 1,4,16; none with --concurrency unless given)",
        ),
    ] = None,
    concurrency: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--concurrency",
            callback=_number_list(int, 1),
            help="continuous-batching cells: keep this many requests running (e.g. 1,4,16,32,64), "
            "tok/s over --window-s after --warmup-s",
        ),
    ] = None,
    warmup_s: Annotated[
        float, typer.Option("--warmup-s", min=0, help="seconds each continuous-batching cell serves before its window")
    ] = 20.0,
    window_s: Annotated[
        float, typer.Option("--window-s", min=1, help="seconds of a continuous-batching cell's timed window")
    ] = 60.0,
    prompt_tokens: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--prompt-tokens", min=1, help="random settings: prompt length in tokens (e.g. 1024, 8192)"),
    ] = None,
    temperatures: Annotated[
        str, typer.Option("--temperatures", callback=_number_list(float, 0), help="sampling temperatures")
    ] = "0,1",
    attention_backend: Annotated[
        str,
        typer.Option(
            "--attention-backend",
            callback=_choice(lambda: _bench_attention().DDTREE_BACKENDS),
            help="the DDTREE arms' attention backend (DDTREE refuses the others, FA3 among them)",
        ),
    ] = "triton",
    baseline_attention_backend: Annotated[
        str,
        typer.Option(
            "--baseline-attention-backend",
            callback=_baseline_backends,
            help="every other arm's (target-only, DFLASH, NEXTN, EAGLE-3): auto lets SGLang pick its "
            "default for the GPU (fa3 on Hopper), as a DFLASH service runs; triton compares on one backend; "
            "a list (flashinfer,triton) also runs DFLASH, NEXTN and EAGLE-3 on each further backend, and "
            "DDTREE is measured against the fastest",
        ),
    ] = "auto",
    tp_size: Annotated[
        int,
        typer.Option("--tp-size", min=1, help="tensor-parallel GPUs per engine, the same for every arm"),
    ] = 1,
    max_new_tokens: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--max-new-tokens", min=1, help="new tokens per request (setting's default)"),
    ] = None,
    prompts: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--prompts", exists=True, dir_okay=False,
            help="a JSON list of token-id lists, or JSON lines of chat conversations ({\"turns\": [...]} "
            "as the DDTree reference's datasets, or {\"messages\": [...]}) put through the target's "
            "chat template",
        ),
    ] = None,
    tokenizer: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--tokenizer", exists=True, file_okay=False,
            help="chat prompts: the tokenizer and chat template to use (default: the target's directory)",
        ),
    ] = None,
    enable_thinking: Annotated[
        bool,
        typer.Option(
            "--enable-thinking",
            help="chat prompts: render with enable_thinking=True (default False, as the DDTree reference)",
        ),
    ] = False,
    min_prompt_tokens: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--min-prompt-tokens", min=1,
            help="chat prompts: lengthen each prompt to at least this many tokens with the next "
            "conversations' last user turns (long-context cells, e.g. 8192)",
        ),
    ] = None,
    mem_fraction_static: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(
            "--mem-fraction-static", min=0.05, max=0.95,
            help="SGLang's share of GPU memory for weights and caches, every arm alike (the bench's "
            "default 0.45 is too little for a 27B target with long prompts on one GPU)",
        ),
    ] = None,
    eagle3_draft: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--eagle3-draft", callback=_model_dir,
            help="an EAGLE-3 drafter for the target: one more baseline arm (EAGLE3, a 3-token chain)",
        ),
    ] = None,
    prompts_per_cell: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--prompts-per-cell", min=1, help="prompts each cell decodes (setting's default)"),
    ] = None,
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", file_okay=False, help="results dir (default: bench-results/SETTING-TIME)"),
    ] = None,
    max_minutes: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option("--max-minutes", min=0.1, help="time box for the GPU sweep; cuts the least informative cells"),
    ] = None,
    reference_dir: ReferenceDirOption = None,
    ddtree_no_overlap: Annotated[
        bool,
        typer.Option(
            "--ddtree-no-overlap",
            help="also run every DDTREE budget without overlap scheduling (as DFLASH always is), "
            "so each algorithm is compared in its faster mode",
        ),
    ] = False,
    ddtree_adaptive: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--ddtree-adaptive",
            callback=_adaptive_budgets,
            help="one more DDTREE arm: each round chooses its budget among these, e.g. chain,32,256 "
            "(--speculative-ddtree-adaptive-budgets; patch sets that carry the flag)",
        ),
    ] = None,
    ddtree_schedule: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--ddtree-schedule",
            callback=_budget_schedule,
            help="one more DDTREE arm: a budget per batch size, e.g. 1:256,8:64,16:chain (the report's recommended "
            "schedule; --speculative-ddtree-budget-schedule; patch sets that carry the flag)",
        ),
    ] = None,
    repeats: Annotated[
        int,
        typer.Option(
            "--engines-per-arm",
            "--repeats",
            min=1,
            help="run every engine group N times (target-only's waves once), in rounds, each a fresh "
            "engine; the report gives the median tok/s per cell, its spread and each engine's",
        ),
    ] = 1,
    engine_order: Annotated[
        str,
        typer.Option(
            "--engine-order",
            callback=_choice(lambda: _bench_plan().ENGINE_ORDERS),
            help="the groups' order within a round: alternate (every other round reversed), cycle "
            "(the same every round) or shuffle (seeded, per round)",
        ),
    ] = "alternate",
    order_seed: Annotated[int, typer.Option("--order-seed", help="the seed of --engine-order shuffle")] = 0,
    chain_control: Annotated[
        bool,
        typer.Option(
            "--chain-control",
            help="one more DDTREE arm, B = 15 with SGLANG_DDTREE_TREE_SHAPE=chain: every round verifies "
            "DFLASH's top-1 chain through DDTREE's machinery (patch sets that carry the switch)",
        ),
    ] = False,
    no_primer: Annotated[
        bool,
        typer.Option(
            "--no-primer",
            help="start no untimed primer engine before the timed ones (by default one of the first DDTREE "
            "arm's config decodes one wave first: a command's first DDTREE engine can run slow)",
        ),
    ] = False,
    only: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--only", help="run only these arms (names as the plan lists them), e.g. dflash,ddtree-b32"),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan and estimates; run nothing")] = False,
    reanalyse: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--reanalyse",
            exists=True,
            file_okay=False,
            help="re-analyse a finished run's records (a --out dir) with this checkout's analysis, "
            "without a GPU; rewrites its bench.json, bench.md and plots (acceptance parity against "
            "--reference-dir, else the run's own reference/ folder where it has one)",
        ),
    ] = None,
    acceptance_curve: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--acceptance-curve",
            exists=True,
            dir_okay=False,
            callback=_acceptance_curve,
            help="project DDTREE ÷ DFLASH per batch size from the measured round costs and this "
            "acceptance per budget: JSON {\"dflash\": τ, \"budgets\": {\"16\": τ, ...}}, CSV rows "
            "budget,τ plus dflash,τ, or a real pair's bench.json (default for random weights: the "
            "DDTree paper's Qwen3-8B curve)",
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Benchmark target-only, DFLASH and DDTREE budgets on ENV's GPU; write JSON, markdown, plots."""
    from ddtree_overlay import render
    from ddtree_overlay.bench import plan as bench_plan
    from ddtree_overlay.commands.bench import BenchRequest, default_out
    from ddtree_overlay.commands.bench import bench as bench_env
    from ddtree_overlay.commands.bench import reanalyse as reanalyse_run

    if reanalyse is not None:
        _run(("bench",), json_out, lambda: reanalyse_run(reanalyse, reference_dir, _load_curve(acceptance_curve)))
    if env is None:
        raise typer.BadParameter("--env is required (unless --reanalyse RUN_DIR)")
    if (target is None) != (draft is None):
        raise typer.BadParameter("--target and --draft go together")
    if target is not None and setting != "fixture":
        raise typer.BadParameter(f"--target/--draft replace the fixture pair; --setting {setting} has its own")
    if (tokenizer or enable_thinking or min_prompt_tokens) and prompts is None:
        raise typer.BadParameter("--tokenizer, --enable-thinking and --min-prompt-tokens go with chat --prompts")
    if eagle3_draft and setting != "fixture":
        raise typer.BadParameter(f"--eagle3-draft needs a real pair; --setting {setting} has random weights")
    if prompt_tokens is not None and setting not in _bench_settings().RANDOM_SHAPES:
        raise typer.BadParameter(f"--prompt-tokens sets the random prompts of {', '.join(_bench_settings().RANDOM_SHAPES)}")
    if prompt_tokens is not None and prompts is not None:
        raise typer.BadParameter("--prompt-tokens and --prompts exclude each other")
    if batch_sizes is None:
        batch_sizes = () if concurrency else bench_plan.DEFAULT_BATCH_SIZES  # type: ignore[assignment]
    config = bench_plan.BenchConfig(
        budgets=budgets,  # type: ignore[arg-type] - the callbacks made tuples
        batch_sizes=batch_sizes,  # type: ignore[arg-type]
        temperatures=temperatures,  # type: ignore[arg-type]
        attention_backend=attention_backend,
        baseline_attention_backend=baseline_attention_backend,
        tp_size=tp_size,
        max_new_tokens=max_new_tokens,
        prompts_per_cell=prompts_per_cell,
        max_minutes=max_minutes,
        ddtree_no_overlap=ddtree_no_overlap,
        adaptive_budgets=ddtree_adaptive or (),  # type: ignore[arg-type]
        budget_schedule=ddtree_schedule or (),  # type: ignore[arg-type]
        repeats=repeats,
        engine_order=engine_order,
        order_seed=order_seed,
        concurrencies=concurrency or (),  # type: ignore[arg-type]
        warmup_s=warmup_s,
        window_s=window_s,
        chain_control=chain_control,
        prompt_tokens=prompt_tokens,
        only=tuple(name.strip() for name in only.split(",") if name.strip()) if only else (),
        primer=not no_primer,
    )
    try:
        # every baseline a pair could add: the plan checks again with the pair's own
        nextn, eagle3 = bench_plan.Arm(bench_plan.NEXTN), bench_plan.Arm(bench_plan.EAGLE3)
        every = [nextn, bench_plan.Arm(bench_plan.NEXTN, overlap=False), eagle3]
        bench_plan.sweep_arms(config, baselines=lambda backend: every)
    except ValueError as error:
        raise typer.BadParameter(f"--only: {error}") from None
    request = BenchRequest(
        setting=setting,
        config=config,
        out=out or default_out(setting),
        target=target,
        draft=draft,
        prompts=prompts,
        reference_dir=reference_dir,
        acceptance_curve=_load_curve(acceptance_curve),
        dry_run=dry_run,
        tokenizer=tokenizer,
        enable_thinking=enable_thinking,
        min_prompt_tokens=min_prompt_tokens,
        eagle3_draft=eagle3_draft,
        mem_fraction_static=mem_fraction_static,
    )
    with render.bench_progress(enabled=not (json_out or dry_run)) as on_event:
        _run(("bench",), json_out, lambda: bench_env(_probe(env), request, on_event=on_event))


@app.command()
def demo(json_out: JsonOption = False) -> None:
    """Scratch env with stock sglang: status, apply, diff --stat, rollback."""
    from ddtree_overlay import render
    from ddtree_overlay.commands.demo import run_demo

    on_step = (lambda _: None) if json_out else render.emit_demo_step
    with render.progress(enabled=not json_out) as progress:
        _run(("demo",), json_out, lambda: run_demo(on_step, progress))


@app.command()
def matrix(
    versions: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--versions", help="releases to check (repeat or comma-separate); default: every supported one"),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="where matrix.json and matrix.md go")] = Path("matrix-report"),
    json_out: JsonOption = False,
) -> None:
    """Per release: download, install, apply, compile, import on CPU, diff, roll back, check RECORD."""
    from packaging.version import InvalidVersion, Version

    from ddtree_overlay import render
    from ddtree_overlay.matrix.run import run_matrix

    releases = [v.strip() for item in versions or () for v in item.split(",") if v.strip()]
    for release in releases:
        try:
            Version(release)
        except InvalidVersion:
            raise typer.BadParameter(f"expected releases such as 0.5.14, got {release!r}", param_hint="--versions") from None

    def call() -> Result:
        with render.progress(enabled=not json_out) as progress:
            return run_matrix(releases, out_dir=out, progress=progress)

    _run(("matrix",), json_out, call)


@app.command()
def compare(
    baseline: Annotated[
        Path, typer.Option("--baseline", help="a run of the DDTree reference code (`benchmark.py --save-path`)")
    ],
    target: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--target", callback=_model_dir, help="the target model dir; default: the path the run recorded"),
    ] = None,
    draft: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--draft", callback=_model_dir, help="the drafter dir; default: the path the run recorded"),
    ] = None,
    records: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--records", help="SGLang's engine records of the run's prompts (JSON lines); "
                     "default: replay with the offline reference decoder, fp32 on the CPU"),
    ] = None,
    env: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--env",
            help="replay through SGLang in this env (virtualenv root or python, the overlay applied) on its "
            "GPU: target-only, DFLASH and DDTREE at the run's budgets, batch 1; its records go to --out",
        ),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="where compare.json, .md and .png go")] = Path("compare-report"),
    json_out: JsonOption = False,
) -> None:
    """Greedy outputs, acceptance (3 % verdict) and speedups of a replay against an offline run."""
    from ddtree_overlay import render
    from ddtree_overlay.commands.compare import CompareRequest
    from ddtree_overlay.commands.compare import compare as compare_runs

    if env is not None and records is not None:
        raise typer.BadParameter("--env and --records exclude each other (--env makes the records)")
    request = CompareRequest(baseline=baseline, target=target, draft=draft, records=records, out=out, env=env)
    progress = (lambda _: None) if json_out else (lambda line: render.stderr.print(line))
    with render.bench_progress(enabled=not json_out and env is not None) as on_event:
        _run(("compare",), json_out, lambda: compare_runs(request, progress, on_event))


@app.command("manifest-refresh", hidden=True)
def manifest_refresh(
    manifest: Annotated[Path, typer.Argument(help="the manifest whose [[file]] tables to rewrite")],
    env: EnvOption,
    json_out: JsonOption = False,
) -> None:
    """Regenerate MANIFEST's pre/post sha256 tables by applying it in memory to ENV."""
    from ddtree_overlay.commands.manifest_refresh import refresh_manifest

    _run(("manifest-refresh",), json_out, lambda: refresh_manifest(manifest, _probe(env, record="full")))


def main() -> None:
    """The console entry point. A reader that leaves (`| head`) ends the run quietly: the
    command's own output is dropped and it exits with its own code (`render`); where Click's
    output (help, usage) meets the closed pipe, Click stops with 1, made 141 here, as a
    SIGPIPE would have ended it."""
    try:
        app()
    except SystemExit as ended:
        if type(sys.stdout).__name__ != "PacifyFlushWrapper":  # what Click wraps a closed stdout in
            raise
        from ddtree_overlay import render

        render.drop_stdout()
        raise SystemExit(EXIT_READER_LEFT) from ended
