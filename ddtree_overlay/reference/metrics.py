"""Per-prompt and aggregate metrics as plain JSON-ready dicts.

Two acceptance numbers, because two conventions exist:
- `accept_len_mean` = sum(accept lens) / rounds: the paper's tau (accepted drafts + 1 per
  round, counted before truncation to max_new_tokens);
- `tokens_per_round` = generated tokens / rounds: SGLang's `spec_accept_length`
  (completion_tokens / spec_verify_ct; the first token comes from prefill, outputs are
  truncated to max_new_tokens), so it can differ from tau by up to ~1/rounds.
"""

from __future__ import annotations

from collections.abc import Sequence

from .decode import DecodeResult


def accept_histogram(accept_lens: Sequence[int], block_size: int) -> list[int]:
    """counts[k-1] = rounds with accept length k, k = 1..max(block_size, longest round)."""
    top = max([block_size, *accept_lens])
    counts = [0] * top
    for a in accept_lens:
        counts[a - 1] += 1
    return counts


def first_divergence(result: DecodeResult, baseline: DecodeResult) -> dict | None:
    """First index where `result` leaves target-only greedy output, with the target's top1-top2
    logit margin at that step (a divergence is a bug unless that margin is within dtype noise)."""
    for i, (a, b) in enumerate(zip(result.tokens, baseline.tokens, strict=False)):
        if a != b:
            return {"index": i, "token": a, "target_token": b, "target_margin": baseline.margins[i]}
    if len(result.tokens) != len(baseline.tokens):
        n = min(len(result.tokens), len(baseline.tokens))
        return {"index": n, "token": None, "target_token": None, "target_margin": None}
    return None


def margin_stats(margins: Sequence[float]) -> dict:
    """Distribution of the target's top1-top2 logit gap (degenerate weights put it near 0)."""
    xs = sorted(margins)
    if not xs:
        return {"count": 0}

    def q(p: float) -> float:
        return xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))]

    return {
        "count": len(xs),
        "mean": sum(xs) / len(xs),
        "min": xs[0],
        "p01": q(0.01),
        "p05": q(0.05),
        "p25": q(0.25),
        "median": q(0.5),
        "p75": q(0.75),
        "p95": q(0.95),
        "max": xs[-1],
        "frac_below": {str(t): sum(x < t for x in xs) / len(xs) for t in (0.01, 0.1, 0.5, 1.0)},
    }


def prompt_metrics(
    result: DecodeResult,
    *,
    block_size: int,
    baseline: DecodeResult | None = None,
    trees: bool = False,
) -> dict:
    rounds = len(result.accept_lens)
    d = {
        "prompt_len": result.prompt_len,
        "new_tokens": len(result.tokens),
        "seconds": result.seconds,
        "tokens_per_s": len(result.tokens) / result.seconds if result.seconds > 0 else None,
        "tokens": list(result.tokens),
    }
    if result.algo != "ar":
        d.update(
            rounds=rounds,
            accept_lens=list(result.accept_lens),
            accept_len_mean=sum(result.accept_lens) / rounds if rounds else None,
            tokens_per_round=len(result.tokens) / rounds if rounds else None,
            accept_histogram=accept_histogram(result.accept_lens, block_size),
        )
    if baseline is not None:
        d["divergence"] = first_divergence(result, baseline)
    if trees and result.trees is not None:
        d["trees"] = [
            {
                "tokens": list(t.tokens),
                "parents": list(t.parents),
                "depths": list(t.depths),
                "accepted": list(t.accepted),
            }
            for t in result.trees
        ]
    return d


def aggregate(
    results: Sequence[DecodeResult],
    *,
    block_size: int,
    baselines: Sequence[DecodeResult] | None = None,
) -> dict:
    new_tokens = sum(len(r.tokens) for r in results)
    seconds = sum(r.seconds for r in results)
    d: dict = {
        "prompts": len(results),
        "new_tokens": new_tokens,
        "seconds": seconds,
        "tokens_per_s": new_tokens / seconds if seconds else None,
    }
    lens = [a for r in results if r.algo != "ar" for a in r.accept_lens]
    if lens:
        per_prompt = [sum(r.accept_lens) / len(r.accept_lens) for r in results if r.accept_lens]
        d.update(
            rounds=len(lens),
            accept_len_mean=sum(lens) / len(lens),
            tokens_per_round=new_tokens / len(lens),
            accept_len_per_prompt_min=min(per_prompt),
            accept_len_per_prompt_max=max(per_prompt),
            accept_histogram=accept_histogram(lens, block_size),
        )
    margin_src = baselines if baselines is not None else [r for r in results if r.algo == "ar"]
    if margin_src:
        d["target_margin"] = margin_stats([m for r in margin_src for m in r.margins])
    if baselines is not None:
        divs = [first_divergence(r, b) for r, b in zip(results, baselines, strict=True)]
        d["divergent_prompts"] = sum(x is not None for x in divs)
        d["divergence_margins"] = [x["target_margin"] for x in divs if x is not None]
    return d
