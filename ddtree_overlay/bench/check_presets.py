"""The GPU acceptance checks' presets: each a list of engines (`CheckArm`), each an arm with
what it adds to the engine and its environment and what its output is judged against
(`bench.checks` runs and judges them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ddtree_overlay.bench.arms import DFLASH, TARGET_ONLY, Arm, BudgetPolicy
from ddtree_overlay.bench.sglang_env import PLAN_STREAM_ENV
from ddtree_overlay.fixture_paths import BYTE_TOKENIZER

# Decode graphs for the batch sizes the preset arms reach (32 prompts at once, fewer as they
# finish); prefill graphs off. Both shorten the engine start; neither changes what is measured.
GRAPH = {
    "attention_backend": "triton",
    "cuda_graph_bs_decode": [1, 2, 4, 8, 16, 32],
    "disable_prefill_cuda_graph": True,
}
# The T=1 arms send 512 single-prompt draws; 32 at a time keeps them on the captured graphs.
WAVES = {"max_running_requests": 32}
SAMPLED_DRAWS = 512
TORCH_TREE = {"SGLANG_DDTREE_TREE_KERNEL": "torch"}  # the default is the Triton kernels
NO_SYNC = {"SGLANG_DDTREE_SYNC_DEBUG": "error"}
# The GDN verify's state (ddtree_gdn_tree): flat is the default, named where an arm compares it
FLAT_STATE = {"SGLANG_DDTREE_HYBRID_STATE": "flat"}
SNAPSHOT_STATE = {"SGLANG_DDTREE_HYBRID_STATE": "snapshot"}  # SGLang's per-node snapshots
# The verify's attention as split-KV over the prefix and a tail-only tree mask (triton only),
# or the backend's kernel with the FULL-layout mask; unnamed, the payload picks (auto)
SPLIT_KV = {"SGLANG_DDTREE_VERIFY_ATTENTION": "splitkv"}
EXTEND = {"SGLANG_DDTREE_VERIFY_ATTENTION": "extend"}
# SGLang's spec-v2 plan stream (off by default; DFlash's published launch commands turn it on):
# the next step's KV reservation runs on a side stream that waits for the last verify on the
# GPU, where 0.5.14 otherwise waits for it on the host before scheduling the next step.
PLAN_STREAM = {PLAN_STREAM_ENV: "1"}
# The drafter's block through the split-KV kernel, every block key visible (the drafter on triton),
# or SGLang's extend kernel; unnamed, the payload picks (auto: split-KV where it can run)
DRAFT_SPLIT_KV = {"SGLANG_DDTREE_DRAFT_ATTENTION": "splitkv"}
DRAFT_EXTEND = {"SGLANG_DDTREE_DRAFT_ATTENTION": "extend"}
# B = 64 up to 8 requests, 32 for 9-16, 8 from 17 (the draft block's width, 16).
SCHEDULE = BudgetPolicy.parse_schedule("1:64,9:32,17:8")
ADAPTIVE = BudgetPolicy.parse_adaptive("8,32,128")
HYBRID_ADAPTIVE = BudgetPolicy.parse_adaptive("8,16,32")
TP_ADAPTIVE = BudgetPolicy.parse_adaptive("chain,32,128")
# Grammar-constrained decoding (SGLang 0.5.17+; the fixtures' byte vocabulary, so the dense
# pair): SGLang's xgrammar backend needs the tokenizer, which the fixture models do not carry.
GRAMMAR_ENGINE = {"skip_tokenizer_init": False, "tokenizer_path": str(BYTE_TOKENIZER), "grammar_backend": "xgrammar"}
LINE_REGEX = r"[ -~]{0,80}\n"  # a line of printable ASCII: mostly what the model writes anyway
DIGITS_REGEX = r"[0-9]{1,8}(,[0-9]{1,8}){0,7};"  # what it never writes: the mask picks every token
# Prompts take these in turn (None: unconstrained), so every batch mixes masked and unmasked
# rows, and the unconstrained requests outlive the others: the scheduler leaves its synchronous
# grammar path mid-run.
GRAMMAR_CYCLE = (LINE_REGEX, DIGITS_REGEX, None)
GRAMMAR_OVERLAP = {"SGLANG_DDTREE_GRAMMAR_OVERLAP": "1"}  # grammar batches overlapped, as DFLASH's
GRAMMAR_PATH_MASK = {"SGLANG_DDTREE_GRAMMAR_MASK": "path"}  # rows filled along the accept path only


@dataclass(frozen=True)
class Draws:
    """Independent draws at T > 0: each of ``prompts`` prompts decoded ``per_prompt`` times,
    ``positions`` tokens after the prefill's (so tree depths 1 … ``positions`` in the first
    round), with top-p and top-k, and min-p where it is above 0. The engines draw at random
    seed ``seed``: engines at one seed draw the same sequences, so a second sample of a setting
    needs another."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float = 0.0
    prompts: int = 32
    per_prompt: int = 256
    positions: int = 8
    seed: int = 0

    def sampling(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            **({"min_p": self.min_p} if self.min_p else {}),
            "max_new_tokens": self.positions + 1,
            "ignore_eos": True,
        }

    @property
    def label(self) -> str:
        min_p = f", min-p {self.min_p:g}" if self.min_p else ""
        return f"T = {self.temperature:g}, top-p {self.top_p:g}, top-k {self.top_k}{min_p}"

    @property
    def tag(self) -> str:
        min_p = f"-minp{self.min_p:g}" if self.min_p else ""
        seed = f"-seed{self.seed}" if self.seed else ""
        return f"t{self.temperature:g}{min_p}-draws{seed}"


@dataclass(frozen=True)
class CheckArm:
    """One engine of a preset: an arm, what it adds to the engine and its environment, and
    what it is judged against."""

    name: str
    arm: Arm
    engine: Mapping[str, Any] = field(default_factory=dict)  # on top of GRAPH and the arm's keywords
    env: Mapping[str, str] = field(default_factory=dict)  # set while its engine lives
    sampled: bool = False  # T = 1: SAMPLED_DRAWS single-prompt draws of 4 tokens, in waves
    draws: Draws | None = None  # T > 0: many prompts' draws, judged against its baseline's
    top2: bool = False  # record logprobs: a baseline's margins judge near-ties; an arm's match its baseline's
    baseline: str | None = None  # greedy outputs judged lossless against this arm's
    tp_of: str | None = None  # the TP = 1 twin whose outputs and acceptance it must match
    grammars: tuple[str | None, ...] = ()  # regexes prompt i decodes under, in turn (None: none)
    on_fail: CheckArm | None = None  # run when this arm fails (e.g. the same without graphs)
    control: bool = False  # draws from a known other law: the check fails if no test tells it apart

    def runner_arm(self, max_new_tokens: int) -> dict[str, Any]:
        """The arm as `in_target/engine_runner.py` reads it."""
        if self.draws:
            sampling = self.draws.sampling()
        elif self.sampled:
            sampling = {"temperature": 1.0, "max_new_tokens": 4, "ignore_eos": True}
        else:
            sampling = {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True}
        waves = self.sampled or self.draws is not None
        engine = GRAPH | (WAVES if waves else {}) | self.arm.engine_args()
        if self.draws and self.draws.seed:
            engine["random_seed"] = self.draws.seed
        engine |= self.engine  # an arm's own seed over its draws' (a control drawing independently)
        runner: dict[str, Any] = {"name": self.name, "engine": engine, "sampling": sampling}
        if self.grammars:
            engine |= GRAMMAR_ENGINE
            runner["sampling_cycle"] = [{"regex": regex} if regex else {} for regex in self.grammars]
        if self.top2:
            runner["top2"] = True
        if self.env:
            runner["env"] = dict(self.env)
        if self.sampled:
            runner |= {"repeat": SAMPLED_DRAWS, "prompts": 1}
        if self.draws:
            runner |= {"repeat": self.draws.per_prompt, "prompts": self.draws.prompts}
        return runner


PLAIN = CheckArm("plain", Arm(TARGET_ONLY), top2=True)
PLAIN_GRAMMAR = CheckArm("plain-grammar", Arm(TARGET_ONLY), top2=True, grammars=GRAMMAR_CYCLE)
PLAIN_T1 = CheckArm("plain-t1", Arm(TARGET_ONLY), sampled=True)


def _ddtree(name: str, policy: BudgetPolicy | int, *, overlap: bool = True, **fields: Any) -> CheckArm:
    """A DDTREE arm, its greedy output judged against `PLAIN`'s unless said otherwise."""
    fields.setdefault("baseline", None if fields.get("sampled") else PLAIN.name)
    return CheckArm(name, Arm.ddtree(policy, overlap=overlap), **fields)


def _dflash(name: str, **fields: Any) -> CheckArm:
    fields.setdefault("baseline", PLAIN.name)
    return CheckArm(name, Arm(DFLASH), **fields)


def _draws_pair(draws: Draws) -> tuple[CheckArm, CheckArm]:
    """Target-only and DDTREE B = 32 drawing the same prompts with the same sampling."""
    plain = CheckArm(f"plain-{draws.tag}", Arm(TARGET_ONLY), draws=draws)
    return plain, _ddtree(f"ddtree-b32-{draws.tag}", 32, draws=draws, baseline=plain.name)


def _eagle_control(draws: Draws) -> CheckArm:
    """DDTREE B = 32 drawing under eagle_sample's own filters (top k first, min-p ignored): a
    law the test must tell apart from target-only's."""
    return _ddtree(
        f"ddtree-b32-{draws.tag}-eagle",
        32,
        draws=draws,
        baseline=f"plain-{draws.tag}",
        env={"SGLANG_DDTREE_SAMPLING_FILTERS": "eagle"},
        control=True,
    )


# The attention control's engine seed, past the draws' own: at the baseline's seed the two engines
# drew the same sequence for 7611 of 8192 draws (2026-12-06), two samples the test cannot compare.
CONTROL_SEED_OFFSET = 100


def _attention_control(draws: Draws) -> CheckArm:
    """Target-only on flashinfer's attention drawing ``draws`` against target-only on triton's:
    the same law through other kernels, so logits that differ by bf16 rounding, drawn from a
    random stream of its own. How far this leans is how far such rounding alone moves the test,
    the scale against which a DDTREE arm's lean (its verify computes the target's logits with
    other kernels than a decode step) reads."""
    return CheckArm(
        f"plain-{draws.tag}-flashinfer",
        Arm(TARGET_ONLY),
        engine={"attention_backend": "flashinfer", "random_seed": draws.seed + CONTROL_SEED_OFFSET},
        draws=draws,
        baseline=f"plain-{draws.tag}",
    )


# Qwen3's recommended sampling (T 0.6, top-p 0.95, top-k 20) and a wider one.
SAMPLING = (Draws(0.6, top_p=0.95, top_k=20), Draws(1.0, top_p=0.8, top_k=50))
# Where top-k and top-p both bind on the fixture pair, so their order changes the law: at T 1.5
# its top 20 tokens hold visibly less than all the mass (at the settings above, nearly all);
# and the same with min-p, which eagle_sample ignores.
FILTERS = (Draws(1.5, top_p=0.8, top_k=20), Draws(1.5, top_p=0.8, top_k=20, min_p=0.2))
# SAMPLING's settings drawn again at other seeds: a second and a third independent sample.
REPEAT = tuple(replace(draws, seed=1) for draws in SAMPLING)
THIRD = tuple(replace(draws, seed=2) for draws in SAMPLING)
# T = 0.6 alone at a fourth seed: the setting whose seed-1 sample leaned (2026-12-06).
FOURTH = (replace(SAMPLING[0], seed=3),)
# Each family's tests (its settings x positions) share one level, whichever arms a run selects.
SAMPLING_FAMILIES = (SAMPLING, FILTERS, REPEAT, THIRD, FOURTH)


PRESETS: Mapping[str, tuple[CheckArm, ...]] = {
    "first": (
        PLAIN,
        _dflash("dflash"),
        _ddtree("ddtree-b15", 15),
        _ddtree("ddtree-b32-eager", 32, engine={"disable_cuda_graph": True}),
        _ddtree("ddtree-b32", 32),
    ),
    "lossless": (
        PLAIN,
        _ddtree("ddtree-b32", 32, on_fail=_ddtree("ddtree-b32-eager", 32, engine={"disable_cuda_graph": True})),
        _dflash("dflash"),
        _ddtree("ddtree-b15", 15),
        _ddtree("ddtree-b32-page16", 32, engine={"page_size": 16}),
        PLAIN_T1,
        _ddtree("ddtree-b32-t1", 32, sampled=True),
    ),
    # The tree stage as Triton kernels against the torch ops (same engine settings).
    "kernels": (
        PLAIN,
        _ddtree("ddtree-b15-torch", 15, env=TORCH_TREE),
        _ddtree("ddtree-b15-triton", 15),
        _ddtree("ddtree-b32-torch", 32, env=TORCH_TREE),
        _ddtree("ddtree-b32-triton", 32),
    ),
    # Any host sync inside a DDTREE round raises (torch's CUDA sync debug mode, scoped to the
    # round): the arm fails, naming the operation.
    "syncs": (
        _ddtree("ddtree-b32-nosync-torch", 32, env=NO_SYNC | TORCH_TREE),
        _ddtree("ddtree-b32-nosync-triton", 32, env=NO_SYNC),
    ),
    # Tensor parallelism (two GPUs): TP=2 against TP=1 and against DFLASH at TP=2; adaptive
    # widths at TP=2, rank 0 choosing for both ranks (a width the ranks disagreed on would hang
    # the engine or break its output).
    "tp": (
        PLAIN,
        _ddtree("ddtree-b32", 32),
        _ddtree("ddtree-b32-tp2", 32, engine={"tp_size": 2}, tp_of="ddtree-b32"),
        _ddtree("ddtree-adaptive-tp2", TP_ADAPTIVE, engine={"tp_size": 2}),
        _dflash("dflash-tp2", engine={"tp_size": 2}, tp_of="dflash"),
        CheckArm("plain-tp2", Arm(TARGET_ONLY), engine={"tp_size": 2}, baseline="plain", tp_of="plain"),
    ),
    # A budget per batch size: one engine, several verify widths. At most 12 running: waves of
    # 12 (B = 32), then one of 8 (B = 64), so the engine switches width mid-run; 32 at once
    # verify 16 tokens (B = 8).
    "schedule": (
        PLAIN,
        _ddtree("ddtree-schedule-waves", SCHEDULE, engine={"max_running_requests": 12}),
        _ddtree("ddtree-schedule-bs32", SCHEDULE),
        _ddtree("ddtree-b64", 64),
    ),
    # A budget chosen per round: lossless whatever the widths chosen; with the profiler on, the
    # windows' `budgets` count the widths used (all three while they are timed, then mostly the
    # chosen one). With overlap and without, and under the sync guard: the policy reads the GPU
    # only through polled events.
    "adaptive": (
        PLAIN,
        _ddtree("ddtree-adaptive", ADAPTIVE, env=NO_SYNC),
        _ddtree("ddtree-adaptive-no-overlap", ADAPTIVE, overlap=False),
        _ddtree("ddtree-adaptive-waves", ADAPTIVE, engine={"max_running_requests": 4}),
        _ddtree("ddtree-adaptive-t1", ADAPTIVE, sampled=True),
        PLAIN_T1,
    ),
    # DDTREE's sampled tokens against target-only's at T = 0.6 and 1.0 with top-p and top-k:
    # 32 prompts x 256 draws per arm, positions 1-8, a pooled chi-square test per position
    # (`bench.sampled`), with the smallest TV distance each test detects reported beside it.
    "sampling": tuple(arm for draws in SAMPLING for arm in _draws_pair(draws)),
    # Top-k and top-p together, then with min-p: DDTREE must draw the law of SGLang's sampler
    # (the nucleus of the unfiltered distribution, then the top k; in a min-p batch on the
    # flashinfer sampler the top k first, then min-p); each control keeps eagle_sample's
    # filters (top k first, min-p ignored), a change the test must detect.
    "sampling-filters": tuple(arm for draws in FILTERS for arm in (*_draws_pair(draws), _eagle_control(draws))),
    # `sampling` again with every engine at random seed 1, then 2 (the other checks' engines draw
    # at 0), the second with the bf16-rounding control at T = 0.6.
    "sampling-repeat": tuple(arm for draws in REPEAT for arm in _draws_pair(draws)),
    "sampling-third": (
        *(arm for draws in THIRD for arm in _draws_pair(draws)),
        _attention_control(THIRD[0]),
    ),
    # T = 0.6 at seed 3 with its attention control: a fourth independent sample of that setting.
    "sampling-fourth": (*_draws_pair(FOURTH[0]), _attention_control(FOURTH[0])),
    "flashinfer": (
        CheckArm("plain-flashinfer", Arm(TARGET_ONLY), engine={"attention_backend": "flashinfer"}, top2=True),
        _ddtree("ddtree-b32-flashinfer", 32, engine={"attention_backend": "flashinfer"}, baseline="plain-flashinfer"),
    ),
    # A Gated-DeltaNet hybrid target (run with --pair hybrid): the tree verify through SGLang's
    # linear-attention tree kernels (the snapshot state, named: the default is the flat state,
    # which hybrid-flat and hybrid-settings run) and the recurrent-state commit, with CUDA
    # graphs, overlap and the radix cache on (every arm decodes its prompts twice, the timed
    # pass from cached prefixes), at one width, two, and adaptive widths; greedy and T = 1.
    "hybrid": (
        PLAIN,
        _ddtree(
            "ddtree-b32",
            32,
            env=SNAPSHOT_STATE,
            on_fail=_ddtree("ddtree-b32-eager", 32, env=SNAPSHOT_STATE, engine={"disable_cuda_graph": True}),
        ),
        _dflash("dflash"),
        _ddtree("ddtree-b16", 16, env=SNAPSHOT_STATE),
        _ddtree("ddtree-adaptive", HYBRID_ADAPTIVE, env=SNAPSHOT_STATE | NO_SYNC),
        PLAIN_T1,
        _ddtree("ddtree-b32-t1", 32, env=SNAPSHOT_STATE, sampled=True),
    ),
    # The hybrid's flat GDN recurrent state (the default: no per-node SSM snapshots, tree-walk
    # verify, replay commit; named here) against the snapshot path and target-only, at one
    # width and adaptive widths (narrower rounds read the stash at the pool's pitch); T = 1.
    "hybrid-flat": (
        PLAIN,
        _ddtree("ddtree-b32-snapshot", 32, env=SNAPSHOT_STATE),
        _ddtree(
            "ddtree-b32-flat",
            32,
            env=FLAT_STATE,
            on_fail=_ddtree("ddtree-b32-flat-eager", 32, env=FLAT_STATE, engine={"disable_cuda_graph": True}),
        ),
        _ddtree("ddtree-adaptive-flat", HYBRID_ADAPTIVE, env=FLAT_STATE | NO_SYNC),
        # narrower widths commit snapshots written at the pool's pitch
        _ddtree("ddtree-adaptive-snapshot", HYBRID_ADAPTIVE, env=SNAPSHOT_STATE | NO_SYNC),
        PLAIN_T1,
        _ddtree("ddtree-b32-flat-t1", 32, env=FLAT_STATE, sampled=True),
    ),
    # The split-KV tree verify against target-only and the FULL-mask verify, at DFLASH's width,
    # B = 32, page size 16, adaptive widths (sync guard) and T = 1; the same preset on either
    # pair (the hybrid's attention layers take it too).
    "splitkv": (
        PLAIN,
        _ddtree("ddtree-b32-extend", 32, env=EXTEND),
        _ddtree("ddtree-b32-splitkv", 32, env=SPLIT_KV),
        _ddtree("ddtree-b15-splitkv", 15, env=SPLIT_KV),
        _ddtree("ddtree-b32-splitkv-page16", 32, env=SPLIT_KV, engine={"page_size": 16}),
        _ddtree("ddtree-adaptive-splitkv", HYBRID_ADAPTIVE, env=SPLIT_KV | NO_SYNC),
        PLAIN_T1,
        _ddtree("ddtree-b32-splitkv-t1", 32, env=SPLIT_KV, sampled=True),
    ),
    # Overlap scheduling with SGLang's plan stream: DDTREE at one width and at adaptive widths
    # (sync guard), greedy and T = 1, and DFLASH under the same setting.
    "plan-stream": (
        PLAIN,
        _ddtree("ddtree-b32-plan-stream", 32, env=PLAN_STREAM),
        _ddtree("ddtree-adaptive-plan-stream", ADAPTIVE, env=PLAN_STREAM | NO_SYNC),
        _dflash("dflash-plan-stream", env=PLAN_STREAM),
        PLAIN_T1,
        _ddtree("ddtree-b32-plan-stream-t1", 32, env=PLAN_STREAM, sampled=True),
    ),
    # The drafter's block through the split-KV kernel: the drafter only proposes, so every arm
    # stays lossless and accepts about what the drafter on SGLang's kernel does (B = 32 beside
    # it, its drafter pinned to that kernel); paged KV, adaptive widths (sync guard), the plan
    # stream and T = 1 too.
    "draft-splitkv": (
        PLAIN,
        _ddtree("ddtree-b32", 32, env=DRAFT_EXTEND),
        _ddtree("ddtree-b32-draft-splitkv", 32, env=DRAFT_SPLIT_KV),
        _ddtree("ddtree-b32-draft-splitkv-page16", 32, env=DRAFT_SPLIT_KV, engine={"page_size": 16}),
        _ddtree("ddtree-adaptive-draft-splitkv", ADAPTIVE, env=DRAFT_SPLIT_KV | PLAN_STREAM | NO_SYNC),
        PLAIN_T1,
        _ddtree("ddtree-b32-draft-splitkv-t1", 32, env=DRAFT_SPLIT_KV, sampled=True),
    ),
    # The hybrid's other serving settings, in the default (flat) state: paged KV (the mamba
    # track interval then follows the page), no overlap, a budget schedule switching widths
    # mid-run, flashinfer attention.
    "hybrid-settings": (
        PLAIN,
        _ddtree("ddtree-b32-page16", 32, engine={"page_size": 16}),
        _ddtree("ddtree-b32-no-overlap", 32, overlap=False),
        _ddtree("ddtree-schedule-waves", SCHEDULE, engine={"max_running_requests": 12}),
        CheckArm("plain-flashinfer", Arm(TARGET_ONLY), engine={"attention_backend": "flashinfer"}, top2=True),
        _ddtree("ddtree-b32-flashinfer", 32, engine={"attention_backend": "flashinfer"}, baseline="plain-flashinfer"),
    ),
    # Output-token logprobs (SGLang 0.5.18+: a bundle with another sglang-kernel swapped in
    # on the torch 2.11 host): greedy outputs lossless, and where the tokens agree each one's
    # logprob (and its top-2) the target-only arm's within bf16 noise.
    "logprobs": (
        PLAIN,
        _ddtree("ddtree-b32-logprobs", 32, top2=True),
        _dflash("dflash-logprobs", top2=True),
        _ddtree("ddtree-adaptive-logprobs", ADAPTIVE, top2=True),
    ),
    # Regex-constrained requests (SGLang 0.5.17+, the dense pair, a bundle with the real
    # xgrammar) mixed with unconstrained ones: greedy outputs judged against target-only's
    # under the same grammars, and every constrained output a full match of its regex. DFLASH
    # applies the grammar to its chain, DDTREE to its tree (the tree goes to the host for the
    # bitmask: no sync guard here); the last arms keep overlap scheduling for grammar batches,
    # and fill the bitmask along the accept path only.
    "grammar": (
        PLAIN_GRAMMAR,
        _ddtree("ddtree-b32-grammar", 32, grammars=GRAMMAR_CYCLE, baseline=PLAIN_GRAMMAR.name),
        _dflash("dflash-grammar", grammars=GRAMMAR_CYCLE, baseline=PLAIN_GRAMMAR.name),
        _ddtree("ddtree-adaptive-grammar", ADAPTIVE, grammars=GRAMMAR_CYCLE, baseline=PLAIN_GRAMMAR.name),
        _ddtree("ddtree-b32-grammar-overlap", 32, grammars=GRAMMAR_CYCLE, env=GRAMMAR_OVERLAP, baseline=PLAIN_GRAMMAR.name),
        _ddtree("ddtree-b32-grammar-path", 32, grammars=GRAMMAR_CYCLE, env=GRAMMAR_PATH_MASK, baseline=PLAIN_GRAMMAR.name),
    ),
}


# The first sglang release whose DDTREE serves what a preset sends (older ones abort those
# requests in DFlash's request check), and the presets whose judge reads the fixtures' byte
# vocabulary (a target of one's own has its own tokenizer).
PRESET_RELEASES = {"grammar": "0.5.17", "logprobs": "0.5.18"}
BYTE_VOCABULARY_PRESETS = frozenset({"grammar"})


def preset_arms(presets: Sequence[str], only: Sequence[str] = ()) -> list[CheckArm]:
    """The arms of ``presets`` in order, less those not in ``only`` (when given)."""
    arms = [arm for name in presets for arm in PRESETS[name]]
    return [arm for arm in arms if arm.name in only] if only else arms
