"""Where a traced step's GPU sits idle: every gap in the union of its GPU events' intervals,
charged to the event that ends it and told apart by what that event waited for.

- ``inside_graphs``: the event and the one that ran before it came from one CUDA graph replay
  (the launch's ``correlation``): the replay's own spacing between nodes, which no host work
  shortens;
- ``launched_late``: its launch reached the runtime after the GPU had run dry, so the GPU waited
  for the host: the host's path from a blocking call or a busy stretch to that launch;
- ``queued``: launched in time yet started after a gap: a wait on another stream or an event,
  or the runtime's latency between two launches.

The kinds add up to the step's span less its busy time (``trace_summary``'s ``span_ms`` and
``busy_ms``); the gap before the next step's first event counts, charged to that event. Per step:
each kind's ms, the GPU events whose gaps add up to most (by kernel name and kind), and for a
DDTREE round, by the stage whose host range launched the event that ends the gap (``between``
included; ``other`` is a launch outside every stage, another thread's say).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ddtree_overlay.bench.kernel_families import short_kernel_name

KINDS = ("inside_graphs", "launched_late", "queued")
TOP_GAPS = 8
OTHER = "other"


def idle_split(
    launched: Sequence[Any],
    count: int,
    *,
    after: Any = None,
    stages: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    thread: Any = None,
) -> dict[str, Any]:
    """The idle ms per step of ``launched`` (``trace_summary``'s launched GPU events of ``count``
    steps: ``.at`` the launch's host time, ``.thread``, ``.correlation``, ``.event``), ``after``
    the next step's first one (its gap is the last), by kind, by the event that ends each gap
    and, given ``stages`` (each stage's host intervals on ``thread``), by stage."""
    order = sorted(launched, key=lambda g: g.event["ts"])
    if after is not None:
        order.append(after)
    by_kind: Counter = Counter()
    by_event: Counter = Counter()
    gaps: Counter = Counter()
    by_stage: dict[str, Counter] = {}
    stage_of = _stage_finder(stages) if stages else None
    end, previous = None, None
    for g in order:
        start = g.event["ts"]
        if end is not None and start > end:
            gap = start - end
            kind = _kind(g, previous, end)
            by_kind[kind] += gap
            key = (short_kernel_name(g.event["name"]), kind)
            by_event[key] += gap
            gaps[key] += 1
            if stage_of:
                stage = stage_of(g.at) if g.thread == thread else OTHER
                by_stage.setdefault(stage, Counter())[kind] += gap
        stop = start + g.event.get("dur", 0)
        if end is None or stop > end:
            end, previous = stop, g
    split: dict[str, Any] = {"idle_ms": _ms(sum(by_kind.values()), count)}
    split |= {f"{kind}_ms": _ms(by_kind[kind], count) for kind in KINDS}
    split["largest"] = [
        {"before": name, "kind": kind, "ms": _ms(us, count), "gaps": round(gaps[name, kind] / count, 2)}
        for (name, kind), us in by_event.most_common(TOP_GAPS)
    ]
    if stage_of:
        split["by_stage"] = {
            stage: {"idle_ms": _ms(sum(kinds.values()), count), **{f"{k}_ms": _ms(kinds[k], count) for k in KINDS if kinds[k]}}
            for stage, kinds in sorted(by_stage.items(), key=lambda kv: -sum(kv[1].values()))
        }
    return split


def _kind(g: Any, previous: Any, idle_from: float) -> str:
    if previous is not None and g.correlation == previous.correlation:
        return "inside_graphs"
    return "launched_late" if g.at > idle_from else "queued"


def _stage_finder(stages: Mapping[str, Sequence[tuple[float, float]]]):
    spans = sorted((start, stop, name) for name, intervals in stages.items() for start, stop in intervals)
    starts = [s[0] for s in spans]

    def stage_of(at: float) -> str:
        i = bisect_right(starts, at) - 1
        return spans[i][2] if i >= 0 and at < spans[i][1] else OTHER

    return stage_of


def _ms(us: float, count: int) -> float:
    return round(us / count / 1000, 3)
