"""The bench report as markdown: throughput, fastest modes, cells, parity, the projection,
engines, host load."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddtree_overlay.bench import attention
from ddtree_overlay.bench.arms import DDTREE, TARGET_ONLY, Arm, BudgetPolicy
from ddtree_overlay.bench.compiling import rate_text
from ddtree_overlay.bench.correctness import PARITY_TOLERANCE
from ddtree_overlay.bench.engines_markdown import engines_table
from ddtree_overlay.bench.plan import capture_batch_sizes
from ddtree_overlay.bench.policy_markdown import policy_lines
from ddtree_overlay.bench.projection import projection_markdown
from ddtree_overlay.bench.recommend import markdown_section
from ddtree_overlay.bench.round_split import STAGES
from ddtree_overlay.bench.sglang_env import env_text
from ddtree_overlay.bench.state_memory import HYBRID_STATE_ENV, SNAPSHOT
from ddtree_overlay.bench.steady_markdown import STEADY_TITLE, steady_section, steady_table
from ddtree_overlay.bench.table_cells import DASH, cell

THROUGHPUT_TITLE = "Output tokens/s (x target-only; DDTREE also x DFLASH)"


def _columns(report: Mapping[str, Any]) -> list[tuple[float, int]]:
    temps = report["config"]["temperatures"]
    sizes = report["config"]["batch_sizes"]
    return [(float(t), int(bs)) for t in sorted(temps) for bs in sorted(sizes)]


def throughput_table(report: Mapping[str, Any]) -> str:
    """Arms x (T, batch): output tokens/s, with x target-only (and x DFLASH for DDTREE)."""
    columns = _columns(report)
    backends = attention.arm_backends(report["groups"])
    head = ["arm", *(["attention"] if backends else []), *(f"T={t:g} bs={bs}" for t, bs in columns)]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    by_arm: dict[str, dict[tuple[float, int], Mapping[str, Any]]] = {}
    for row in report["cells"]:
        by_arm.setdefault(Arm.of_row(row).label, {})[(float(row["temperature"]), int(row["batch_size"]))] = row
    for label, cells in by_arm.items():
        texts = attention.backend_cells(backends, cells.values())
        for key in columns:
            row = cells.get(key)
            if row is None or row["status"] != "ok":
                texts.append(row["status"] if row else DASH)
                continue
            text = f"{row['tok_per_s']:.0f}"
            extra = []
            if row["algorithm"] != TARGET_ONLY and row.get("speedup_vs_target"):
                extra.append(f"x{row['speedup_vs_target']:.2f}")
            if row["algorithm"] == DDTREE and row.get("speedup_vs_dflash"):
                extra.append(f"x{row['speedup_vs_dflash']:.2f} DFLASH")
            texts.append(text + (f" ({', '.join(extra)})" if extra else ""))
        lines.append(f"| {label} | " + " | ".join(texts) + " |")
    return "\n".join(lines)


def summary_tables(report: Mapping[str, Any]) -> str:
    """What the bench prints when it ends, each table under its bench.md title: the waves cells'
    tok/s, and the continuous-batching cells' (x DFLASH, x target-only), whichever the run has."""
    parts = []
    if report["cells"]:
        parts.append(f"{THROUGHPUT_TITLE}:\n{throughput_table(report)}")
    if report.get("steady"):
        parts.append(f"{STEADY_TITLE}:\n{steady_table(report['steady'], attention.arm_backends(report['groups']))}")
    return "\n\n".join(parts)


def _mode_text(entry: Mapping[str, Any]) -> str:
    return attention.on_backend(entry) + ("" if entry["overlap"] else " no overlap")


def _versus_dflash_text(entry: Mapping[str, Any]) -> str:
    return f"{entry['tok_per_s']:.0f}{_mode_text(entry)} (x{entry['speedup_vs_dflash']:.2f})"


def fastest_modes_table(report: Mapping[str, Any]) -> str:
    """DFLASH's faster scheduling mode per column, then DDTREE's per budget (x that DFLASH),
    then the fastest DDTREE arm, and how much of its acceptance advantage its speedup keeps."""
    columns = _columns(report)
    by_column = {(float(c["temperature"]), int(c["batch_size"])): c for c in report.get("fastest_modes") or ()}
    arms = sorted({BudgetPolicy.of_row(b).sort_key: BudgetPolicy.of_row(b).label for c in by_column.values() for b in c["budgets"]}.items())
    texts: dict[str, dict[tuple[float, int], str]] = {"DFLASH": {}}
    texts |= {f"DDTREE {label}": {} for _, label in arms}
    texts["fastest DDTREE"] = {}
    per_acceptance = "fastest DDTREE: speedup ÷ acceptance ratio"
    texts[per_acceptance] = {}
    per_round = "fastest DDTREE per round: acceptance ratio ÷ step ratio (continuous batching)"
    texts[per_round] = {}
    worst_label = "fastest DDTREE, worst case: its slowest repeat ÷ DFLASH's fastest"
    if any("worst_case" in c for c in by_column.values()):
        texts[worst_label] = {}
    for key, column in by_column.items():
        texts["DFLASH"][key] = f"{column['dflash']['tok_per_s']:.0f}{_mode_text(column['dflash'])}"
        for entry in column["budgets"]:
            texts[f"DDTREE {BudgetPolicy.of_row(entry).label}"][key] = _versus_dflash_text(entry)
        best = column["best"]
        texts["fastest DDTREE"][key] = f"{BudgetPolicy.of_row(best).label}: " + _versus_dflash_text(best)
        if "speedup_per_acceptance" in best:
            texts[per_acceptance][key] = (
                f"{best['speedup_per_acceptance']:.0%} (x{best['speedup_vs_dflash']:.2f} ÷ "
                f"x{best['acceptance_ratio']:.2f})"
            )
        if "per_round_speedup" in best:
            texts[per_round][key] = (
                f"x{best['per_round_speedup']:.2f} (x{best['acceptance_ratio']:.2f} ÷ x{best['step_ratio']:.2f})"
            )
            if "step_ratio_at_cap" in best:
                texts[per_round][key] += (
                    f"; at the caps x{best['per_round_speedup_at_cap']:.2f} (÷ x{best['step_ratio_at_cap']:.2f})"
                )
        if "worst_case" in column:
            worst = column["worst_case"]
            texts[worst_label][key] = (
                f"x{worst['speedup_vs_dflash']:.2f} ({worst['ddtree_tok_per_s']:.0f} ÷ "
                f"{worst['dflash_tok_per_s']:.0f})"
            )
    lines = ["| arm | " + " | ".join(f"T={t:g} bs={bs}" for t, bs in columns) + " |"]
    lines.append("|---" * (len(columns) + 1) + "|")
    for label, row in texts.items():
        lines.append(f"| {label} | " + " | ".join(row.get(key, DASH) for key in columns) + " |")
    return "\n".join(lines)


BUSY_PROCESS = 0.05  # CPU s per wall s below which an engine process is left out of the host table


def host_table(report: Mapping[str, Any]) -> str | None:
    """Per timed cell and repeat: what the host did meanwhile (engine_runner's ``host``)."""
    lines = []
    for row in report["cells"]:
        for run in row.get("repeats") or ():
            host = run.get("host")
            if not host:
                continue
            busy = [p for p in host.get("processes") or () if p["cpu_per_wall"] >= BUSY_PROCESS][:3]
            process = "; ".join(
                f"{p['comm']} {p['cpu_per_wall']:.2f} on CPU {p['last_cpu']}"
                + (f" (core {p['core']})" if p.get("core") else "") for p in busy
            ) or DASH
            others = "; ".join(f"{o['comm']} {o['cpu_per_wall']:.2f}" for o in host.get("others") or ()) or DASH
            allowed = (host.get("processes") or [{}])[0].get("cpus") or DASH
            load = " → ".join(f"{v:.2f}" for v in host["load1"])
            lines.append(
                f"| {row['name']} | {run['repeat']} | {rate_text(run)} | "
                f"{cell(run.get('step_ms'))} | {load} | {cell(host.get('busy_cores'))} of {host['cpus']} | "
                f"{process} | {others} | {allowed} |"
            )
    if not lines:
        return None
    head = (
        "| cell | repeat | tok/s | wall ms/step | load (1 min) | busy cores | "
        "busy engine processes: CPU s/s, last CPU (core) | busiest other processes: CPU s/s | CPUs allowed |"
    )
    return "\n".join([head, "|---" * 9 + "|", *lines])


def _schedule_lines(recommended: Mapping[str, Any] | None) -> list[str]:
    if not recommended:
        return []
    text = (
        "Budget per batch size from this sweep (the fastest fixed budget at each measured batch size, "
        f"T = 0, whose greedy output was not judged lossy; batch sizes in between take the smaller one's): "
        f"`--speculative-ddtree-budget-schedule {recommended['schedule']}`."
    )
    if recommended["below_dflash"]:
        sizes = ", ".join(str(bs) for bs in recommended["below_dflash"])
        text += f" At batch size {sizes} even the fastest budget stays below DFLASH."
    smallest = recommended["measured_batch_sizes"][0]
    if smallest > 1:
        text += f" Nothing below batch size {smallest} was measured: its budget is carried down to 1."
    return ["", text]


def _lossless_text(row: Mapping[str, Any]) -> str:
    lossless = row.get("lossless")
    if not lossless:
        return DASH
    text = f"{lossless['identical']}/{lossless['prompts']}"
    if lossless.get("undecoded"):
        text += f" ({lossless['undecoded']} prompts decoded by one side only, not compared)"
    first = lossless.get("first_divergence")
    if first:
        text += f", first at {first['index']} (margin {cell(first['margin'], '.3f')})"
    if len(row.get("repeats") or ()) > 1 and first:
        text += f" in repeat {lossless['repeat']}"
    return text


def _per_repeat_text(row: Mapping[str, Any]) -> str:
    """Each repeat's tok/s in order (`compiling.rate_text`)."""
    return ", ".join(rate_text(entry) for entry in row.get("repeats") or ()) or DASH


def cells_table(report: Mapping[str, Any]) -> str:
    """A row per cell; with several repeats, tok/s per repeat beside the median."""
    per_repeat = report["config"].get("repeats", 1) > 1
    head = (
        "| arm | bs | T | tok/s | " + ("tok/s per repeat | " if per_repeat else "")
        + "x target | x DFLASH | accept len | tok/round | rounds | "
        "wall ms/step | " + " | ".join(STAGES) + " | other | host ms | graph | same as target-only |"
    )
    lines = [head, "|---" * (14 + per_repeat + len(STAGES)) + "|"]
    for row in report["cells"]:
        if row["status"] != "ok":
            lines.append(
                f"| {Arm.of_row(row).label} | {row['batch_size']} | {row['temperature']:g} | {row['status']}"
                f"{': ' + str(row['reason']) if row['reason'] else ''} |"
                + (f" {_per_repeat_text(row)} |" if per_repeat else "")
                + " |" * (10 + len(STAGES))
            )
            continue
        split = (row.get("profile") or {}).get("ms_per_round") or {}
        graph = (row.get("profile") or {}).get("cuda_graph_fraction")
        cells = [
            Arm.of_row(row).label,
            str(row["batch_size"]),
            f"{row['temperature']:g}",
            cell(row["tok_per_s"], ".0f"),
            *([_per_repeat_text(row)] if per_repeat else []),
            cell(row.get("speedup_vs_target")),
            cell(row.get("speedup_vs_dflash")),
            cell(row.get("acceptance_length")),
            cell(row.get("tokens_per_round")),
            cell(row.get("rounds"), "d"),
            cell(row.get("step_ms")),
            *(cell(split.get(stage), ".3f") for stage in STAGES),
            cell(split.get("other"), ".3f"),
            cell((row.get("profile") or {}).get("host_ms_per_round"), ".3f"),
            cell(graph, ".0%"),
            _lossless_text(row),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _histogram_table(report: Mapping[str, Any]) -> str:
    lines = ["| cell | rounds with accept length 1, 2, ... |", "|---|---|"]
    for row in report["cells"]:
        if row.get("acceptance_histogram"):
            lines.append(f"| {row['name']} | {', '.join(map(str, row['acceptance_histogram']))} |")
    return "\n".join(lines)


def _parity_table(report: Mapping[str, Any]) -> str:
    lines = [
        "| arm | cell | SGLang tok/round | reference tok/round | ratio | prompts within 3% "
        "| same-sequence prompts | within 3% there | max diff there | status |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["parity"]:
        if row["status"] == "missing":
            lines.append(f"| {row['group']} |" + f" {DASH} |" * 8 + f" missing: {row['reason']} |")
            continue
        ratio = cell(row["ratio"], ".3f")
        if len(row.get("ratios") or ()) > 1:
            each = ", ".join(cell(r["ratio"], ".3f") for r in row["ratios"])
            ratio += f" (repeat {row['repeat']}; each: {each})"
        lines.append(
            f"| {row['group']} | {row['cell']} | {cell(row['sglang_tokens_per_round'], '.3f')} | "
            f"{cell(row['reference_tokens_per_round'], '.3f')} | {ratio} | "
            f"{row['per_prompt_within']} | {row['same_sequence_prompts']} | "
            f"{row['same_sequence_within']} | {cell(row['same_sequence_max_rel_diff'], '.1%')} | "
            f"{row['status']} |"
        )
    return "\n".join(lines)


def _repeats_bullet(config: Mapping[str, Any]) -> list[str]:
    repeats = config.get("repeats", 1)
    if repeats == 1:
        return []
    return [
        f"- **Repeats**: the engine groups ran {repeats} times, in rounds (every other round in "
        "reverse order), each run a fresh engine; target-only, the correctness reference, ran once "
        "(round 1). tok/s and wall ms/step are medians over the "
        "repeats a cell got (tok/s per repeat in the per-cell table), and every speedup, table and "
        "plot uses them; acceptance and the round split are the median repeat's. Greedy outputs "
        "of every repeat are judged, parity is checked on every repeat (the furthest shown), and "
        "a repeat that failed fails its cell."
    ]


def _captured(config: Mapping[str, Any]) -> list[int]:
    return capture_batch_sizes([*config["batch_sizes"], *config.get("concurrencies", ())])


def _lengths(config: Mapping[str, Any]) -> str:
    lengths = config.get("prompt_lengths") or []
    if not lengths:
        return "the setting's"
    return str(lengths[0]) if len(lengths) == 1 else f"{lengths[0]}{DASH}{lengths[-1]}"


def _hybrid_state_text(setting: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    """On a hybrid target, the mode of DDTREE's verify state (`bench.state_memory`)."""
    if not setting.get("hybrid"):
        return ""
    state = config.get("hybrid_state", SNAPSHOT)  # reports from before the flat state: snapshots
    return f" DDTREE's Gated-DeltaNet verify state: {state} (`{HYBRID_STATE_ENV}`); DFLASH's and NEXTN's: {SNAPSHOT}."


def _and(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def _baseline_backends(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The baselines' backends a report's config lists (none in reports from before the option)."""
    text = config.get("baseline_attention_backend")
    return attention.baseline_backends(text) if text else ()


def _backends_text(report: Mapping[str, Any]) -> str:
    """The Engines line's attention backend and tensor-parallel size: one backend for every arm,
    or each backend with the algorithms whose engines ran it, SGLang's choice named as such."""
    config, groups = report["config"], report["groups"]
    tp = f"tensor-parallel size {config['tp_size']}"
    if attention.arm_backends(groups) is None:
        backend = groups[0]["attention_backend"] if groups else config["attention_backend"]
        return f"attention backend {attention.backend_text(backend, '`')} and {tp} for every arm"
    sglangs = attention.AUTO in _baseline_backends(config)  # the baselines asked for SGLang's choice
    parts = []
    for backend, algorithms in attention.algorithms_on(groups).items():
        chosen = sglangs and backend != attention.AUTO and DDTREE not in algorithms
        names = [a if a == DDTREE else Arm(a).label for a in algorithms]
        note = f" ({attention.AUTO_TEXT})" if chosen else ""
        parts.append(f"{attention.backend_text(backend, '`')} for {_and(names)}{note}")
    return f"attention backend {', '.join(parts)}; {tp} for every arm"


def markdown_report(report: Mapping[str, Any]) -> str:
    setting, config, context = report["setting"], report["config"], report["context"]
    parts = [
        f"# DDTREE bench: {setting['name']}",
        "",
        f"- **Setting**: {setting['note'].rstrip('.')}.",
        f"- **When / where**: {context.get('started', '?')}; {context.get('gpu', '?')}; "
        f"sglang {context.get('sglang', '?')}, torch {context.get('torch', '?')}.",
        f"- **Engines**: {_backends_text(report)}, decode CUDA "
        f"graphs on (captured for batch sizes {_captured(config)}), prefill "
        "graphs off, "
        "one engine per (algorithm, budget, scheduling) serving every cell; "
        + (
            "DDTREE and DFLASH with and without overlap scheduling."
            if config.get("ddtree_no_overlap")
            else "DDTREE and DFLASH with overlap scheduling, DFLASH also without."
        )
        + _hybrid_state_text(setting, config)
        + env_text(config),
        f"- **Prompts**: {_lengths(config)} tokens.",
        *(
            [
                f"- **Cells**: {config['prompts_per_cell']} prompts per cell, sent in waves of `bs` "
                f"concurrent requests, {config['max_new_tokens']} new tokens each (ignore_eos). tok/s = "
                "output tokens / decode wall time (each wave until its slowest request finishes); wall "
                "ms/step = decode time / batch-level decode steps (the steps of requests an engine queued "
                "behind its cap counted too).",
            ]
            if report["cells"]
            else []
        ),
        *_repeats_bullet(config),
        "",
        *steady_section(report, attention.arm_backends(report["groups"])),
    ]
    if not report["cells"]:
        return _closing(report, parts)
    parts += [
        f"## {THROUGHPUT_TITLE}",
        "",
        throughput_table(report),
        "",
        "## DDTREE against DFLASH, each in its faster scheduling mode",
        "",
        "Output tokens/s of the faster of overlap scheduling on and off (`no overlap` when off "
        "won): DFLASH's, DDTREE's per budget with x that DFLASH, and the fastest DDTREE arm. "
        "tok/s counts fixed waves of `bs` requests, each wave as long as its slowest request; "
        "under continuous batching the ratio is the per-round one (tokens per round ÷ wall ms "
        "per step, against DFLASH's)."
        + (
            ""
            if config.get("ddtree_no_overlap")
            else " DDTREE ran with overlap scheduling only (`--ddtree-no-overlap` adds the other mode)."
        )
        + (
            " DFLASH's is also the fastest of its attention backends (`on <backend>` where another than "
            "the first listed won)."
            if len(_baseline_backends(config)) > 1
            else ""
        )
        + (f" Attention: {versus}." if (versus := attention.versus_backends(report["groups"])) else ""),
        "",
        fastest_modes_table(report),
        *_schedule_lines(report.get("recommended_schedule")),
        "",
        "## Per cell",
        "",
        "accept len = (tokens - 1) / rounds per request (bonus included, prefill token excluded); "
        "tok/round = SGLang's spec_accept_length; stage columns = mean GPU ms per DDTREE round "
        "from ddtree_profile (other = round minus stages: launch gaps); host ms = host time per "
        "round inside the stages (about the stages' GPU sum: the round waits on the host); "
        "graph = share of verify "
        "rounds in a CUDA graph; same as target-only = greedy outputs identical to the target-only "
        "margins run (target-only at the same batch size when it is missing), and the first "
        "divergence with the target's top1-top2 margin on that run (T = 0).",
        "",
        cells_table(report),
        *policy_lines(
            report["cells"],
            "Budgets the adaptive and schedule arms' profiled rounds took (rounds per budget):",
            "the cell's end",
        ),
        "",
        "## Acceptance-length histograms",
        "",
        _histogram_table(report),
        "",
    ]
    if report["parity"]:
        parts += [
            "## Acceptance parity with the offline reference decoder",
            "",
            f"Reference: `python -m ddtree_overlay.reference`, fp32 on the CPU, the same prompts, "
            f"T = 0. Status `off` when the ratio leaves 1 +- {PARITY_TOLERANCE:.0%}.",
            "",
            _parity_table(report),
            "",
        ]
    return _closing(report, parts)


def _closing(report: Mapping[str, Any], parts: list[str]) -> str:
    """The projection, host, engines, issues, notes and recommendation sections after ``parts``,
    as one text."""
    if report.get("projection"):
        versus = attention.versus_backends(report["groups"])
        parts += [
            "## Projection: DDTREE ÷ DFLASH with another pair's acceptance",
            "",
            projection_markdown(report["projection"]),
            *(["", f"Round costs measured with {versus}."] if versus else []),
            "",
        ]
    host = host_table(report)
    if host:
        parts += [
            "## The host during each cell",
            "",
            "Load average, busy cores over the cell (all CPUs' busy share x CPU count), and the "
            "engine processes that worked (SGLang's scheduler first, as a rule) with the CPU and "
            "physical core each last ran on: two on one core's hyperthreads slow each other; then "
            "the busiest processes outside the engine (another job, an engine still shutting down). "
            "Host-bound arms move more between engines than between budgets; this is where to look.",
            "",
            host,
            "",
        ]
    parts += ["## Engines", "", engines_table(report), ""]
    if report["issues"] or report["notes"]:
        parts += ["## Issues and notes", ""]
        parts += [f"- issue: {text}" for text in report["issues"]]
        parts += [f"- note: {text}" for text in report["notes"]]
        parts.append("")
    parts += markdown_section(report.get("recommendation"))
    return "\n".join(parts)
