#!/usr/bin/env python3
"""Train a fixture pair: a byte-level target, then its DFlash drafter (self-distilled).

    python3 scripts/train_fixtures.py --out ddtree_overlay/fixtures            # H200, ~7 min
    python3 scripts/train_fixtures.py --smoke --out /tmp/fx-smoke              # CPU, ~1 min
    python3 scripts/train_fixtures.py --pair hybrid --out DIR                  # H200, ~8 min

Pairs: `dense` (Qwen3ForCausalLM, 6 layers) and `hybrid` (Qwen3_5ForConditionalGeneration,
Qwen3.6-27B's layout at small scale: 8 layers = 2 x (3 Gated DeltaNet + 1 gated attention),
partial rotary, attention output gate, fp32 recurrent state, plus a one-layer MTP head trained
next to the target on the same batches, its own weights only, from the target's detached hidden
states and frozen embedding / lm_head, as `Qwen3_5ForCausalLMMTP` reads them).

Text: the Python standard library sources of the interpreter running this script
(`sysconfig.get_paths()["stdlib"]`, `*.py`, sorted relative paths; a file is held out when
sha256(relative path) % 10 == 0). The digest of the file list is logged: the same interpreter
build gives the same corpus.

Vocabulary: ids 0..255 are bytes, 256 BOS, 257 EOS (between files), 258 PAD (unused),
259 MASK (drafter only; never in text); vocab_size 272 (padded to a multiple of 16).

Phases (each time-boxed by wall clock; the chosen step/row counts are logged, and passing them
back with --target-steps/--draft-steps/--rollouts plus a large --gen-seconds repeats the run up to
GPU kernel nondeterminism; see ddtree_overlay/fixtures/README.md for the exact command):
1. target: causal LM on [BOS] + 1023-byte windows of the training files, bf16 autocast, fp32
   master weights, AdamW, warmup then cosine.
2. rollouts: greedy continuations by the (bf16) target of [BOS] + 64..128-byte training windows,
   to 512 tokens; only the generated part is supervised (self-distillation).
3. drafter: DFlash objective. Per sequence N random anchors a among generated positions;
   block = [x_a, MASK x 15] at positions a..a+15 seeing target features at positions < a only
   (aux = residual after target layers `target_layer_ids`), bidirectional inside the block;
   slot k predicts x_{a+k} through the frozen target lm_head; CE weights exp(-(k-1)/7).
4. save both checkpoints (bf16 safetensors + config.json), held-out prompts, training log;
   then a short DFlash acceptance evaluation with the reference decoder, which also reports the
   median top1 - top2 logit margin of the target's greedy choices.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import math
import platform
import random
import sys
import sysconfig
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ddtree_overlay"))  # import `reference` alone, not ddtree_overlay

from reference.decode import generate_ar, generate_dflash  # noqa: E402
from reference.hybrid import (  # noqa: E402
    Qwen35Config,
    Qwen35Target,
    checkpoint_name,
    init_hybrid_weights,
    load_any_target,
    qwen35_config_json,
)
from reference.metrics import aggregate, margin_stats  # noqa: E402
from reference.model import (  # noqa: E402
    DFlashConfig,
    DFlashDraft,
    Qwen3Config,
    Qwen3Target,
    dflash_config_json,
    init_weights,
    load_draft,
    qwen3_config_json,
    save_checkpoint,
)

BOS, EOS, PAD, MASK = 256, 257, 258, 259
# vision token ids of the hybrid's config: padding ids of the vocabulary, never in text
IMAGE, VIDEO, VISION_START, VISION_END = 260, 261, 262, 263
VOCAB = 272
BLOCK = 16
GAMMA = 7.0
TARGET_LAYER_IDS = (1, 3, 4)

TARGET_CFG = Qwen3Config(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    max_position_embeddings=2048,
)
DRAFT_CFG = DFlashConfig(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    max_position_embeddings=2048,
    block_size=BLOCK,
    mask_token_id=MASK,
    target_layer_ids=TARGET_LAYER_IDS,
    num_target_layers=6,
)


HYBRID_LAYER_IDS = (1, 4, 6)
HYBRID_TARGET_CFG = Qwen35Config(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=384,
    num_hidden_layers=8,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    linear_num_key_heads=2,
    linear_num_value_heads=6,  # 3 value heads per key head, as Qwen3.6-27B's 48 / 16
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    linear_conv_kernel_dim=4,
    full_attention_interval=4,
    partial_rotary_factor=0.25,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    max_position_embeddings=2048,
    mtp_num_hidden_layers=1,
)
HYBRID_DRAFT_CFG = replace(
    DRAFT_CFG,
    intermediate_size=384,
    target_layer_ids=HYBRID_LAYER_IDS,
    num_target_layers=HYBRID_TARGET_CFG.num_hidden_layers,
)
# SGLang builds the vision tower from this (0.5.14 always does); text prompts never run it, and
# the checkpoint carries no weights for it.
TINY_VISION = {
    "model_type": "qwen3_5",
    "depth": 1,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_heads": 2,
    "in_channels": 3,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "out_hidden_size": HYBRID_TARGET_CFG.hidden_size,
    "num_position_embeddings": 64,
    "deepstack_visual_indexes": [],
    "hidden_act": "gelu_pytorch_tanh",
    "initializer_range": 0.02,
}


@dataclass(frozen=True)
class Pair:
    """What differs between the fixture pairs; everything else is shared."""

    name: str
    target_cfg: Qwen3Config | Qwen35Config
    draft_cfg: DFlashConfig

    def new_target(self, seed: int) -> Qwen3Target | Qwen35Target:
        if isinstance(self.target_cfg, Qwen35Config):
            model = Qwen35Target(self.target_cfg)
            init_hybrid_weights(model, seed=seed)
        else:
            model = Qwen3Target(self.target_cfg)
            init_weights(model, seed=seed)
        return model

    def save_target(self, model: torch.nn.Module, out: Path) -> None:
        if isinstance(self.target_cfg, Qwen35Config):
            config = qwen35_config_json(
                self.target_cfg, bos=BOS, eos=EOS, pad=PAD, vision=TINY_VISION
            )
            config.update(
                image_token_id=IMAGE,
                video_token_id=VIDEO,
                vision_start_token_id=VISION_START,
                vision_end_token_id=VISION_END,
            )
            save_checkpoint(model, config, out, rename=checkpoint_name)
        else:
            save_checkpoint(
                model, qwen3_config_json(self.target_cfg, bos=BOS, eos=EOS, pad=PAD), out
            )


PAIRS = {
    "dense": Pair("dense", TARGET_CFG, DRAFT_CFG),
    "hybrid": Pair("hybrid", HYBRID_TARGET_CFG, HYBRID_DRAFT_CFG),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class TrainingLog(dict):
    """A run's ``training_log.json`` in ``out``: what ran (argv, args, torch, device, ``fields``)
    and each phase's results, rewritten with the seconds so far at every ``save``."""

    def __init__(self, out: Path, args, device: str, **fields) -> None:
        super().__init__(argv=sys.argv[1:], args=dict(vars(args)), torch=torch.__version__, device=device, **fields)
        self._path = out / "training_log.json"
        self._start = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self._start

    def save(self) -> None:
        self["total_seconds"] = round(self.seconds(), 2)
        self._path.write_text(json.dumps(self, indent=1, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------------------------
# Corpus


def stdlib_corpus(max_files: int | None) -> tuple[list[bytes], list[bytes], dict]:
    root = Path(sysconfig.get_paths()["stdlib"])
    rels = sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if p.is_file() and not {"site-packages", "dist-packages"} & set(p.relative_to(root).parts)
    )
    if max_files is not None:
        rels = rels[:max_files]
    train, held = [], []
    train_n = held_n = 0
    for rel in rels:
        data = (root / rel).read_bytes()
        if int(hashlib.sha256(rel.encode()).hexdigest(), 16) % 10 == 0:
            held.append(data)
            held_n += 1
        else:
            train.append(data)
            train_n += 1
    info = {
        "python": platform.python_version(),
        "stdlib": str(root),
        "files": len(rels),
        "train_files": train_n,
        "heldout_files": held_n,
        "train_bytes": sum(map(len, train)),
        "heldout_bytes": sum(map(len, held)),
        "file_list_sha256": hashlib.sha256("\n".join(rels).encode()).hexdigest(),
        "split": "heldout iff int(sha256(relpath), 16) % 10 == 0",
    }
    return train, held, info


def to_stream(files: list[bytes], device: str) -> torch.Tensor:
    """Files joined as bytes, each followed by EOS -> int64 [total]."""
    parts = []
    for data in files:
        if data:  # torch.frombuffer rejects empty buffers (empty __init__.py files)
            parts.append(torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64))
        parts.append(torch.tensor([EOS]))
    return torch.cat(parts).to(device)


def heldout_prompts(files: list[bytes], n: int, seed: int) -> list[list[int]]:
    """n prompts = [BOS] + 64..128 bytes starting at a line start of a held-out file."""
    rng = random.Random(seed)
    order = list(range(len(files)))
    rng.shuffle(order)
    out: list[list[int]] = []
    for fi in order * (n // max(1, len(order)) + 2):
        data = files[fi]
        length = rng.randint(64, 128)
        starts = [0] + [i + 1 for i, b in enumerate(data[:-1]) if b == 10]
        starts = [s for s in starts if s + length <= len(data) and data[s : s + length].strip()]
        if not starts:
            continue
        s = rng.choice(starts)
        out.append([BOS, *data[s : s + length]])
        if len(out) == n:
            break
    assert len(out) == n, f"only {len(out)} held-out prompts"
    return out


def windows(stream: torch.Tensor, batch: int, length: int, g: torch.Generator) -> torch.Tensor:
    """[batch, length] = BOS + (length-1) consecutive stream tokens at random offsets."""
    offs = torch.randint(0, stream.numel() - length, (batch, 1), generator=g, device=stream.device)
    body = stream[offs + torch.arange(length - 1, device=stream.device)]
    return torch.cat([torch.full((batch, 1), BOS, device=stream.device), body], dim=1)


# ----------------------------------------------------------------------------------------------
# Training loop helpers


class Schedule:
    """Linear warmup, then cosine to 10 % over `total` steps; `total` is fixed by the caller
    (explicit) or calibrated from the measured step time against a wall-clock budget."""

    def __init__(self, lr: float, warmup: int, total: int | None) -> None:
        self.lr, self.warmup, self.total = lr, warmup, total

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        total = self.total or 10**9
        t = min(1.0, (step - self.warmup) / max(1, total - self.warmup))
        return self.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train_loop(
    name: str,
    step_fn,
    params,
    *,
    lr: float,
    warmup: int,
    steps: int | None,
    budget_s: float,
    log_every: int,
    device: str,
) -> dict:
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0, eps=1e-8)
    sched = Schedule(lr, warmup, steps)
    curve, t0, step = [], time.perf_counter(), 0
    calib_at, t_calib = 20, None
    while True:
        if sched.total is not None and step >= sched.total:
            break
        if steps is None and time.perf_counter() - t0 > budget_s:  # explicit steps: no time box
            log(f"{name}: wall-clock stop at step {step}")
            break
        for grp in opt.param_groups:
            grp["lr"] = sched(step)
        loss, stats = step_fn(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step == 5:
            sync(device)
            t_calib = time.perf_counter()
        if steps is None and step == calib_at:
            sync(device)
            per = (time.perf_counter() - t_calib) / (calib_at - 5)
            sched.total = max(
                calib_at + 1, int((budget_s - (time.perf_counter() - t0)) / per) + calib_at
            )
            log(f"{name}: {per * 1e3:.1f} ms/step -> {sched.total} steps in {budget_s:.0f} s")
        if step % log_every == 0 or step == 1:
            row = {
                "step": step,
                "lr": sched(step - 1),
                "loss": float(loss.detach()),
                "grad_norm": float(gnorm),
                "t": round(time.perf_counter() - t0, 2),
            }
            row.update(
                {
                    k: (round(float(v), 4) if v.numel() == 1 else [round(a, 3) for a in v.tolist()])
                    for k, v in stats.items()
                }
            )
            curve.append(row)
            log(
                f"{name} step {step}/{sched.total} loss {row['loss']:.4f} "
                + " ".join(
                    f"{k}={v}"
                    for k, v in row.items()
                    if k not in ("step", "loss", "t", "lr", "grad_norm") and not isinstance(v, list)
                )
            )
    sync(device)
    return {
        "steps": step,
        "seconds": round(time.perf_counter() - t0, 2),
        "lr": lr,
        "warmup": warmup,
        "curve": curve,
    }


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def amp(device: str):
    return (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if device == "cuda"
        else contextlib.nullcontext()
    )


# ----------------------------------------------------------------------------------------------
# Phases


def train_target(stream: torch.Tensor, pair: Pair, args, device: str):
    model = pair.new_target(args.seed)
    model.to(device).train()
    g = torch.Generator(device=device).manual_seed(args.seed)
    pos = torch.arange(args.seq, device=device).expand(args.batch, args.seq)

    def step(_: int):
        x = windows(stream, args.batch, args.seq + 1, g)
        with amp(device):
            out = model(x[:, :-1], pos)
        loss = F.cross_entropy(out.logits.view(-1, VOCAB), x[:, 1:].reshape(-1))
        stats = {"bits_per_byte": loss.detach() / math.log(2)}
        if getattr(model, "mtp", None) is None:
            return loss, stats
        with amp(device):
            mtp_logits = mtp_forward(model, x[:, :-1], out.hidden)
        mtp_loss = F.cross_entropy(mtp_logits.float().reshape(-1, VOCAB), x[:, 2:].reshape(-1))
        stats["mtp_loss"] = mtp_loss.detach()
        return loss + mtp_loss, stats  # disjoint parameters: each loss trains its own

    info = train_loop(
        "target",
        step,
        list(model.parameters()),
        lr=args.target_lr,
        warmup=args.warmup,
        steps=args.target_steps,
        budget_s=args.target_seconds,
        log_every=args.log_every,
        device=device,
    )
    return model.eval(), info


def mtp_forward(model: Qwen35Target, ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """MTP logits [B, S-1, V]: at position i, embed(t_{i+1}) and the target's normed hidden h_i
    predict t_{i+2}. Only the head's own weights get gradients."""
    emb = F.embedding(ids[:, 1:], model.model.embed_tokens.weight.detach())
    pos = torch.arange(ids.shape[1] - 1, device=ids.device).expand(ids.shape[0], -1)
    h = model.mtp(emb, hidden[:, :-1].detach(), pos)
    return F.linear(h, model.lm_head.weight.detach())


@torch.no_grad()
def target_eval(model, held: torch.Tensor, device: str, n: int, seq: int) -> dict:
    g = torch.Generator(device=device).manual_seed(1234)
    x = windows(held, n, seq + 1, g)
    pos = torch.arange(seq, device=device).expand(n, seq)
    out = model(x[:, :-1], pos)
    logits = out.logits
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
    top = torch.topk(logits.float(), 2, dim=-1).values
    gaps = (top[..., 0] - top[..., 1]).flatten()
    gaps = gaps[
        torch.randperm(gaps.numel(), generator=torch.Generator().manual_seed(0))[:20000].to(
            gaps.device
        )
    ]
    acc = (logits.argmax(-1) == x[:, 1:]).float().mean()
    info = {
        "heldout_bits_per_byte": float(loss) / math.log(2),
        "heldout_top1_acc": float(acc),
        "teacher_forced_top1_top2_gap": margin_stats(gaps.tolist()),
    }
    if getattr(model, "mtp", None) is not None:
        mtp = mtp_forward(model, x[:, :-1], out.hidden).argmax(-1)
        info["heldout_mtp_top1_acc"] = float((mtp == x[:, 2:]).float().mean())
        # NEXTN accepts the head's token when the target's own greedy choice agrees with it
        info["heldout_mtp_agrees_with_target"] = float(
            (mtp[:, :-1] == logits[:, 1:-1].argmax(-1)).float().mean()
        )
    return info


@torch.no_grad()
def make_rollouts(
    tgt, stream: torch.Tensor, args, device: str
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Greedy continuations to length args.roll_len of [BOS] + 64..128-byte training windows."""
    g = torch.Generator(device=device).manual_seed(args.seed + 7)
    rng = random.Random(args.seed + 7)
    rows, plens, t0 = [], [], time.perf_counter()
    s = args.roll_len
    while (
        sum(r.shape[0] for r in rows) < args.rollouts
        and time.perf_counter() - t0 < args.gen_seconds
    ):
        p = rng.randint(65, 129)  # BOS + 64..128 bytes
        b = args.roll_batch
        x = torch.empty(b, s, dtype=torch.long, device=device)
        x[:, :p] = windows(stream, b, p, g)
        cache = tgt.new_cache(b, s)
        logits = tgt(x[:, :p], torch.arange(p, device=device).expand(b, p), cache=cache).logits[
            :, -1
        ]
        for t in range(p, s):
            x[:, t] = logits.argmax(-1)
            if t + 1 < s:
                logits = tgt(
                    x[:, t : t + 1],
                    torch.full((b, 1), t, device=device),
                    cache=cache,
                    cache_start=t,
                ).logits[:, -1]
        rows.append(x)
        plens.append(torch.full((b,), p, device=device))
        log(f"rollouts: {sum(r.shape[0] for r in rows)} rows ({time.perf_counter() - t0:.1f} s)")
    x, pl = torch.cat(rows), torch.cat(plens)
    gen_mask = torch.arange(s, device=device)[None] >= pl[:, None]
    info = {
        "rows": x.shape[0],
        "length": s,
        "seconds": round(time.perf_counter() - t0, 2),
        "eos_frac_generated": float((x[gen_mask] == EOS).float().mean()),
        "distinct_bytes_generated": int(x[gen_mask].unique().numel()),
        "example": bytes(t for t in x[0].tolist() if t < 256).decode("utf-8", "replace")[:600],
    }
    return x, pl, info


def train_draft(
    tgt, rows: torch.Tensor, plens: torch.Tensor, pair: Pair, args, device: str
) -> tuple[DFlashDraft, dict]:
    draft = DFlashDraft(pair.draft_cfg)
    init_weights(draft, seed=args.seed + 1)
    draft.to(device).train()
    g = torch.Generator(device=device).manual_seed(args.seed + 2)
    r, s = rows.shape
    ar = torch.arange(s, device=device)
    k = torch.arange(1, BLOCK, device=device)
    w_k = torch.exp(-(k - 1).float() / GAMMA)  # slot k=1 weight 1, decaying (paper Eq. 4, gamma 7)
    head = tgt.lm_head.weight.detach()
    n_anchor = args.anchors

    def step(_: int):
        idx = torch.randint(0, r, (args.draft_batch,), generator=g, device=device)
        x, p = rows[idx], plens[idx]
        b = x.shape[0]
        with torch.no_grad():
            layer_ids = pair.draft_cfg.target_layer_ids
            aux = tgt(x, ar.expand(b, s), capture=layer_ids, logits=False).aux  # [B, S, 3H]
            valid = (ar[None] >= p[:, None]) & (ar[None] <= s - 2)  # a and a+1 both generated
            keys = torch.rand(b, s, generator=g, device=device).masked_fill(~valid, -1.0)
            anchors = keys.topk(n_anchor, dim=1).indices.sort(dim=1).values  # [B, N]
            block = torch.full((b, n_anchor, BLOCK), MASK, device=device)
            block[:, :, 0] = x.gather(1, anchors)
            emb = tgt.model.embed_tokens(block)  # frozen target embedding
            lab_pos = anchors[..., None] + k  # [B, N, 15]: slot k <-> token at a+k (same position)
            ok = lab_pos < s
            labels = x.gather(1, lab_pos.clamp(max=s - 1).view(b, -1)).view(b, n_anchor, BLOCK - 1)
        with amp(device):
            h = draft.forward_anchor_blocks(emb, anchors, aux)
            logits = F.linear(h[:, :, 1:], head)  # frozen target lm_head
        ce = F.cross_entropy(
            logits.float().reshape(-1, VOCAB), labels.reshape(-1), reduction="none"
        ).view_as(labels)
        w = w_k * ok
        loss = (ce * w).sum() / w.sum()
        with torch.no_grad():
            hit = (logits.argmax(-1) == labels) & ok
            slot_acc = hit.float().sum((0, 1)) / ok.float().sum((0, 1))
            tau = (
                1 + hit.long().cumprod(-1).sum(-1).float().mean()
            )  # block accept length, bonus included
        return loss, {
            "slot1_acc": slot_acc[0],
            "slot8_acc": slot_acc[7],
            "block_tau": tau,
            "slot_acc": slot_acc,
        }

    info = train_loop(
        "draft",
        step,
        list(draft.parameters()),
        lr=args.draft_lr,
        warmup=args.warmup,
        steps=args.draft_steps,
        budget_s=args.draft_seconds,
        log_every=args.log_every,
        device=device,
    )
    return draft.eval(), info


def evaluate(out: Path, prompts: list[list[int]], args, device: str) -> dict:
    """DFlash acceptance with the reference decoder on the saved (bf16 -> fp32) checkpoints."""
    tgt = load_any_target(out / "target", dtype=torch.float32, device=device)
    dft = load_draft(out / "draft", dtype=torch.float32, device=device)
    results, baselines, t0 = [], [], time.perf_counter()
    for p in prompts[: args.eval_prompts]:
        if time.perf_counter() - t0 > args.eval_seconds:
            break
        results.append(generate_dflash(tgt, dft, p, max_new_tokens=args.eval_new_tokens))
        baselines.append(generate_ar(tgt, p, max_new_tokens=args.eval_new_tokens))
        log(
            f"eval: prompt {len(results)} tau {sum(results[-1].accept_lens) / len(results[-1].accept_lens):.3f}"
        )
    agg = aggregate(results, block_size=BLOCK, baselines=baselines)
    agg["device"], agg["dtype"], agg["max_new_tokens"] = device, "float32", args.eval_new_tokens
    return agg


# ----------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument(
        "--out",
        required=True,
        help="fixtures dir to write (target/, draft/, heldout_prompts.json, training_log.json)",
    )
    p.add_argument("--pair", choices=tuple(PAIRS), default="dense", help="which fixture pair")
    p.add_argument("--smoke", action="store_true", help="tiny CPU run for testing the script")
    p.add_argument("--device", default=None, help="cuda|cpu (default: cuda if available)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target-seconds", type=float, default=150)
    p.add_argument("--gen-seconds", type=float, default=45)
    p.add_argument("--draft-seconds", type=float, default=140)
    p.add_argument("--eval-seconds", type=float, default=40)
    p.add_argument(
        "--target-steps",
        type=int,
        default=None,
        help="fixed step count (default: fill --target-seconds)",
    )
    p.add_argument(
        "--draft-steps",
        type=int,
        default=None,
        help="fixed step count (default: fill --draft-seconds)",
    )
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--target-lr", type=float, default=2e-3)
    p.add_argument("--draft-lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--rollouts", type=int, default=24576)
    p.add_argument("--roll-batch", type=int, default=2048)
    p.add_argument("--roll-len", type=int, default=512)
    p.add_argument("--draft-batch", type=int, default=48)
    p.add_argument("--anchors", type=int, default=128)
    p.add_argument("--n-heldout", type=int, default=64)
    p.add_argument("--eval-prompts", type=int, default=16)
    p.add_argument("--eval-new-tokens", type=int, default=128)
    p.add_argument("--log-every", type=int, default=100)
    args = p.parse_args()
    if args.smoke:
        args.device = args.device or "cpu"
        args.max_files = 120
        args.target_steps = args.target_steps or 30
        args.draft_steps = args.draft_steps or 30
        args.batch, args.seq, args.warmup, args.log_every = 4, 128, 5, 10
        args.rollouts, args.roll_batch, args.roll_len = 16, 8, 192
        args.draft_batch, args.anchors = 2, 16
        args.eval_prompts, args.eval_new_tokens, args.n_heldout = 2, 32, 64
        if args.pair == "hybrid":  # the GDN layers cost more per token on a CPU
            args.target_steps = min(args.target_steps, 10)
            args.draft_steps = min(args.draft_steps, 10)
            args.batch, args.rollouts, args.roll_len = 2, 8, 160
            args.eval_prompts, args.eval_new_tokens = 1, 24
    else:
        args.max_files = None
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return args


def main() -> int:
    args = parse_args()
    device, pair = args.device, PAIRS[args.pair]
    torch.manual_seed(args.seed)
    if device == "cuda":
        log(f"device {torch.cuda.get_device_name()} torch {torch.__version__}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_log = TrainingLog(out, args, device)
    train_files, held_files, corpus = stdlib_corpus(args.max_files)
    run_log["corpus"] = corpus
    log(f"corpus: {json.dumps(corpus)}")
    prompts = heldout_prompts(held_files, args.n_heldout, args.seed)
    (out / "heldout_prompts.json").write_text(json.dumps(prompts) + "\n")
    train_stream, held_stream = to_stream(train_files, device), to_stream(held_files, device)

    target, run_log["target"] = train_target(train_stream, pair, args, device)
    run_log["target"].update(
        target_eval(target, held_stream, device, n=16 if args.smoke else 64, seq=args.seq)
    )
    pair.save_target(target, out / "target")
    log(f"target saved: {json.dumps({k: v for k, v in run_log['target'].items() if k != 'curve'})}")
    run_log.save()

    frozen = copy.deepcopy(target).to(torch.bfloat16 if device == "cuda" else torch.float32).eval()
    for prm in frozen.parameters():
        prm.requires_grad_(False)
    rows, plens, run_log["rollouts"] = make_rollouts(frozen, train_stream, args, device)
    run_log.save()

    draft, run_log["draft"] = train_draft(frozen, rows, plens, pair, args, device)
    save_checkpoint(draft, dflash_config_json(pair.draft_cfg), out / "draft")
    log("draft saved")
    run_log.save()
    del rows, plens

    run_log["eval_dflash"] = evaluate(out, prompts, args, device)
    log(
        f"eval: {json.dumps({k: v for k, v in run_log['eval_dflash'].items() if k != 'target_margin'})}"
    )
    margin = run_log["eval_dflash"].get("target_margin", {})
    log(f"target top1-top2 logit margin at its greedy steps: median {margin.get('median')}")
    run_log.save()
    sizes = {str(f.relative_to(out)): f.stat().st_size for f in sorted(out.rglob("*.safetensors"))}
    log(
        f"sizes {sizes} total {sum(sizes.values())} bytes; done in {run_log.seconds():.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
