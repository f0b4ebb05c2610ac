#!/usr/bin/env python3
"""Train an EAGLE-3 drafter for the dense fixture target, on the CPU (self-distilled).

    python3 scripts/train_eagle3_fixture.py --out ddtree_overlay/fixtures/eagle3     # CPU, ~8 min
    python3 scripts/train_eagle3_fixture.py --smoke --out /tmp/e3-smoke              # CPU, seconds

The target (`ddtree_overlay/fixtures/target`) stays frozen, in fp32. Phases, each time-boxed by
wall clock (the chosen counts are logged; --rollouts, --train-steps and a large --gen-seconds
repeat a run):
1. rollouts: greedy continuations by the target of [BOS] + 64..128-byte windows of the training
   files (`train_fixtures.py`'s corpus and held-out split), to --roll-len tokens; only the
   generated positions are supervised.
2. drafter: EAGLE-3 with its training-time test over --ttt-steps steps
   (`Eagle3Draft.forward_training_time_test`): step 0 reads embed(x_{j+1}) and
   fc(target features at j) and predicts x_{j+2}; step k reads embed(x_{j+1+k}) (the token a
   round that accepted the earlier drafts feeds) and step k-1's own hidden, and predicts
   x_{j+2+k}. CE weights 0.8^k. Features: the residual stream after target layers
   `TARGET_LAYER_IDS` (the DFlash drafter's), computed once by the frozen target. The
   drafter's lm_head starts as a copy of the target's; the embedding is the target's, frozen.
3. save config.json + bf16 model.safetensors (`LlamaForCausalLMEagle3`, full vocabulary: d2t
   zeros) and training_log.json, then measure the chain (3 drafted tokens, greedy) on the saved
   checkpoint against target-only greedy decoding on the fixture's held-out prompts, fp32.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_fixtures as tf  # it puts ddtree_overlay/ on sys.path for `reference`
from reference.decode import generate_ar, generate_eagle3
from reference.eagle3 import (
    Eagle3Config,
    Eagle3Draft,
    eagle3_config_json,
    load_eagle3_draft,
)
from reference.metrics import aggregate
from reference.model import init_weights, load_target, save_checkpoint

FIXTURES = tf.ROOT / "ddtree_overlay" / "fixtures"
STEP_WEIGHT = 0.8  # CE weight of training-time-test step k: 0.8^k, as EAGLE-3 trains


def drafter_config(target_cfg, intermediate_size: int) -> Eagle3Config:
    return Eagle3Config(
        vocab_size=target_cfg.vocab_size,
        hidden_size=target_cfg.hidden_size,
        intermediate_size=intermediate_size,
        num_attention_heads=target_cfg.num_attention_heads,
        num_key_value_heads=target_cfg.num_key_value_heads,
        head_dim=target_cfg.head_dim,
        aux_layer_ids=tf.TARGET_LAYER_IDS,
        rms_norm_eps=target_cfg.rms_norm_eps,
        rope_theta=target_cfg.rope_theta,
        max_position_embeddings=target_cfg.max_position_embeddings,
    )


def new_drafter(target, args) -> Eagle3Draft:
    draft = Eagle3Draft(drafter_config(target.cfg, args.intermediate_size))
    init_weights(draft, seed=args.seed + 1)
    with torch.no_grad():
        draft.lm_head.weight.copy_(target.lm_head.weight)
    return draft.train()


@torch.no_grad()
def target_features(target, rows: torch.Tensor, chunk: int = 16) -> torch.Tensor:
    """rows: [R, S] -> [R, S, K*H] fp32: the target's features at every position, computed once
    (a training step would otherwise spend a quarter of its time recomputing them)."""
    positions = torch.arange(rows.shape[1]).expand(chunk, -1)
    parts = [
        target(part, positions[: part.shape[0]], capture=tf.TARGET_LAYER_IDS, logits=False).aux
        for part in rows.split(chunk)
    ]
    return torch.cat(parts)


def ttt_batch(
    target, rows: torch.Tensor, aux: torch.Tensor, plens: torch.Tensor, steps: int
) -> dict:
    """Inputs and labels of one batch; T = S - steps positions j per row.

    rows: [B, S] rollouts, aux: [B, S, K*H] their target features, plens: [B] prompt lengths.
    Labels x_{j+2+k} count where they are generated tokens inside the row."""
    b, s = rows.shape
    t = s - steps
    j = torch.arange(t).expand(b, t)
    with torch.no_grad():
        step_emb = [target.model.embed_tokens(rows[:, 1 + k : 1 + k + t]) for k in range(steps)]
    labels, ok = [], []
    for k in range(steps):
        at = j + 2 + k
        labels.append(rows.gather(1, at.clamp(max=s - 1)))
        ok.append((at < s) & (at >= plens[:, None]))
    return {"aux": aux[:, :t], "step_emb": step_emb, "positions": j, "labels": labels, "ok": ok}


def ttt_loss(draft: Eagle3Draft, batch: dict) -> tuple[torch.Tensor, dict]:
    outs = draft.forward_training_time_test(batch["step_emb"], batch["aux"], batch["positions"])
    loss, weights, hits = 0.0, 0.0, []
    for k, (r2, labels, ok) in enumerate(zip(outs, batch["labels"], batch["ok"], strict=True)):
        logits = draft.logits(r2)
        loss = loss + STEP_WEIGHT**k * F.cross_entropy(logits[ok], labels[ok])
        weights += STEP_WEIGHT**k
        hits.append(logits.detach().argmax(-1) == labels)
    every = torch.stack(batch["ok"]).all(0)  # anchors whose whole chain is supervised
    hit = torch.stack(hits, dim=-1)[every]  # [anchors, steps]
    # A round ending its extend at j accepts drafts while they are right (each step here reads
    # the right token). Averaged over anchors, not rounds: a decode's rounds skip the positions
    # a long acceptance covered, so its mean per round is lower.
    anchor_accept_len = 1 + hit.long().cumprod(-1).sum(-1).float().mean()
    step_acc = torch.stack([h[o].float().mean() for h, o in zip(hits, batch["ok"], strict=True)])
    stats = {"step1_acc": step_acc[0], "anchor_accept_len": anchor_accept_len, "step_acc": step_acc}
    return loss / weights, stats


def train_drafter(
    target, rows: torch.Tensor, plens: torch.Tensor, args
) -> tuple[Eagle3Draft, dict]:
    draft = new_drafter(target, args)
    g = torch.Generator().manual_seed(args.seed + 2)
    t0 = time.perf_counter()
    aux = target_features(target, rows)
    tf.log(f"target features of {rows.shape[0]} rollouts in {time.perf_counter() - t0:.1f} s")

    def step(_: int):
        idx = torch.randint(0, rows.shape[0], (args.batch,), generator=g)
        return ttt_loss(draft, ttt_batch(target, rows[idx], aux[idx], plens[idx], args.ttt_steps))

    info = tf.train_loop(
        "eagle3",
        step,
        list(draft.parameters()),
        lr=args.lr,
        warmup=args.warmup,
        steps=args.train_steps,
        budget_s=args.train_seconds,
        log_every=args.log_every,
        device="cpu",
    )
    return draft.eval(), info


def evaluate(target, out: Path, prompts: list[list[int]], args) -> dict:
    """The chain on the saved (bf16 -> fp32) checkpoint against target-only greedy decoding."""
    draft = load_eagle3_draft(out)
    results, baselines, t0 = [], [], time.perf_counter()
    for prompt in prompts[: args.eval_prompts]:
        if time.perf_counter() - t0 > args.eval_seconds:
            break
        kw = {"max_new_tokens": args.eval_new_tokens}
        results.append(generate_eagle3(target, draft, prompt, num_steps=args.ttt_steps, **kw))
        baselines.append(generate_ar(target, prompt, **kw))
        r = results[-1]
        tf.log(f"eval: prompt {len(results)} tau {sum(r.accept_lens) / len(r.accept_lens):.3f}")
    agg = aggregate(results, block_size=args.ttt_steps + 1, baselines=baselines)
    agg.update(
        device="cpu",
        dtype="float32",
        max_new_tokens=args.eval_new_tokens,
        num_steps=args.ttt_steps,
        prompts_file="ddtree_overlay/fixtures/heldout_prompts.json",
        accept_lens_per_prompt=[list(r.accept_lens) for r in results],
    )
    return agg


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument(
        "--out",
        required=True,
        help="drafter dir to write (config.json, model.safetensors, training_log.json)",
    )
    p.add_argument("--smoke", action="store_true", help="tiny run for testing the script")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gen-seconds", type=float, default=100)
    p.add_argument("--rollouts", type=int, default=1024)
    p.add_argument("--roll-batch", type=int, default=64)
    p.add_argument("--roll-len", type=int, default=384)
    p.add_argument("--train-seconds", type=float, default=240)
    p.add_argument(
        "--train-steps",
        type=int,
        default=None,
        help="fixed step count (default: fill --train-seconds)",
    )
    p.add_argument("--batch", type=int, default=8)
    p.add_argument(
        "--ttt-steps",
        type=int,
        default=3,
        help="training-time-test steps = drafted tokens per round",
    )
    p.add_argument("--intermediate-size", type=int, default=512)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--eval-seconds", type=float, default=150)
    p.add_argument("--eval-prompts", type=int, default=64)
    p.add_argument("--eval-new-tokens", type=int, default=256)
    args = p.parse_args()
    args.max_files = None
    if args.smoke:
        args.max_files = 60
        args.rollouts, args.roll_batch, args.roll_len = 4, 4, 160
        args.train_steps, args.batch, args.warmup, args.log_every = args.train_steps or 4, 2, 2, 2
        args.eval_prompts, args.eval_new_tokens = 2, 16
    return args


def main() -> int:
    args = parse_args()
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_log = tf.TrainingLog(out, args, "cpu", threads=torch.get_num_threads())
    target = load_target(FIXTURES / "target", dtype=torch.float32)
    for prm in target.parameters():
        prm.requires_grad_(False)
    train_files, _, run_log["corpus"] = tf.stdlib_corpus(args.max_files)
    tf.log(f"corpus: {json.dumps(run_log['corpus'])}")
    stream = tf.to_stream(train_files, "cpu")
    rows, plens, run_log["rollouts"] = tf.make_rollouts(target, stream, args, "cpu")
    run_log.save()

    draft, run_log["draft"] = train_drafter(target, rows, plens, args)
    save_checkpoint(draft, eagle3_config_json(draft.cfg, bos=tf.BOS, eos=tf.EOS, pad=tf.PAD), out)
    tf.log("drafter saved")
    run_log.save()

    prompts = json.loads((FIXTURES / "heldout_prompts.json").read_text())
    run_log["eval_eagle3"] = evaluate(target, out, prompts, args)
    long_fields = ("target_margin", "accept_lens_per_prompt")
    summary = {k: v for k, v in run_log["eval_eagle3"].items() if k not in long_fields}
    tf.log(f"eval: {json.dumps(summary)}")
    run_log["bytes"] = {
        f.name: f.stat().st_size for f in sorted(out.iterdir()) if f.name != "training_log.json"
    }
    run_log.save()
    tf.log(f"sizes {run_log['bytes']}; done in {run_log.seconds():.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
