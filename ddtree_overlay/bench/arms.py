"""The arms a measurement compares, and how a DDTREE arm picks its tree budget: one vocabulary
for parsing, naming, labelling and the engine arguments, used by the CLI, the bench plan and
report, verify's smoke and checks, and the GPU scripts.

A budget policy is one of
    fixed      one tree budget B for every round           --speculative-ddtree-budget 32
    schedule   a budget per batch size (from bs on: B)     --speculative-ddtree-budget-schedule 1:256,8:64
    adaptive   each round picks among several budgets      --speculative-ddtree-adaptive-budgets 8,32,256
A schedule step or an adaptive choice may be `chain` instead of a budget: DFLASH's verify (the
drafter's top-1 path through its block) inside DDTREE.

Arm names, as bench groups, check arms and `round_trace` arms spell them:
    target-only (or plain), dflash, ddtree-b32, ddtree-schedule-1x256-8x64 (-16xchain),
    ddtree-adaptive-8-32-256 (ddtree-adaptive-chain-32), nextn, eagle3, each with `-no-overlap`
    when overlap scheduling is off; a baseline arm on another attention backend than the
    sweep's first baseline one ends in `@<backend>` (dflash@triton, dflash-no-overlap@triton).
Labels, as reports print them: ``B=32``, ``schedule 1:256,8:64``, ``adaptive 8/32/256``;
``DDTREE B=32 (no overlap)``, ``DFLASH``, ``DFLASH on triton``, ``target-only``, ``NEXTN``,
``EAGLE-3``.

NEXTN (the target's own MTP head) and EAGLE-3 (a separate EAGLE-3 drafter) are the baselines
users serve next to DFLASH: chains of `CHAIN_DRAFT` tokens, the shape SGLang chooses itself for
these targets when none is given (`_auto_choose_speculative_params`).

The bench's chain control (``--chain-control``) is a DDTREE arm whose rounds verify DFLASH's
top-1 chain through DDTREE's machinery (``SGLANG_DDTREE_TREE_SHAPE=chain``): ``ddtree-b15-chain``,
``DDTREE B=15 chain control``.

The payload parses the same flags on its side (`BudgetPolicy` there); the two halves share the
flag grammar, not code, since the payload runs inside SGLang.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TARGET_ONLY, DFLASH, DDTREE = "target-only", "DFLASH", "DDTREE"
NEXTN, EAGLE3 = "NEXTN", "EAGLE3"
ALGORITHMS = (TARGET_ONLY, DFLASH, DDTREE, NEXTN, EAGLE3)
CHAIN_BASELINES = (NEXTN, EAGLE3)  # chain drafters with their own draft model: not DFlash's
# A chain of 3 drafted tokens (4 verified): SGLang's auto-chosen EAGLE shape for most targets.
CHAIN_DRAFT = {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
BLOCK_SIZE = 16  # the DFlash drafter's block: DFLASH verifies this many tokens per request
CHAIN = "chain"  # a schedule step's or adaptive choice's spelling of DFLASH's chain
Budget = int | str  # a tree budget, or CHAIN
Schedule = tuple[tuple[int, Budget], ...]  # a budget schedule's (smallest batch size, budget) steps
NO_OVERLAP = "-no-overlap"
CHAIN_CONTROL = "-chain"  # the chain control arm's name suffix
CHAIN_ENV = {"SGLANG_DDTREE_TREE_SHAPE": "chain"}
# On a hybrid target SGLang caps every engine's concurrent requests to what its recurrent state
# holds; DDTREE refuses to start under that cap unless told to serve it, as DFLASH always does.
SERVE_FEWER_ENV = {"SGLANG_DDTREE_SERVE_FEWER_REQUESTS": "1"}
AUTO = "auto"  # an attention backend asked for by asking for none: SGLang's default for the GPU


def engine_keywords(backend: str) -> dict[str, str]:
    """The `sglang.Engine` keyword asking for attention ``backend``: none for `AUTO`."""
    return {} if backend == AUTO else {"attention_backend": backend}


def verify_width(budget: int, block_size: int = BLOCK_SIZE) -> int:
    """DDTREE's verify width N at budget B: the root and B drafted nodes, at least a block."""
    return max(budget + 1, block_size)


def number_list(text: str, kind: type, minimum: float) -> tuple:
    """"4,8,16" -> (4, 8, 16), sorted and each once; ValueError unless every one is a number
    of ``kind`` at least ``minimum``."""
    try:
        values = tuple(kind(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or min(values) < minimum:
        raise ValueError(f"expected comma-separated numbers >= {minimum:g}, got {text!r}")
    return tuple(sorted(set(values)))


def parse_budget(text: str) -> Budget:
    """"32" -> 32, "chain" -> CHAIN; ValueError otherwise."""
    text = text.strip()
    if text == CHAIN:
        return CHAIN
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{text!r} is neither a budget >= 1 nor {CHAIN!r}")
    return int(text)


def budget_order(budget: Budget) -> int:
    """Sort key: the chain first (as the payload orders it), then budgets ascending."""
    return 0 if budget == CHAIN else int(budget)


def drafted_nodes(budget: Budget, block_size: int = BLOCK_SIZE) -> int:
    """Tree nodes a round of this budget verifies: the chain's is the block's, less the root."""
    return block_size - 1 if budget == CHAIN else int(budget)


@dataclass(frozen=True)
class BudgetPolicy:
    """Exactly one of: a fixed ``budget``, a ``schedule``, or ``adaptive`` budgets."""

    budget: int | None = None
    schedule: Schedule = ()
    adaptive: tuple[Budget, ...] = ()

    def __post_init__(self) -> None:
        if sum((self.budget is not None, bool(self.schedule), bool(self.adaptive))) != 1:
            raise ValueError(f"a budget policy is one of budget, schedule, adaptive: {self!r}")

    @classmethod
    def fixed(cls, budget: int) -> BudgetPolicy:
        return cls(budget=budget)

    @classmethod
    def parse_adaptive(cls, text: str) -> BudgetPolicy:
        """"chain,8,32,256": at least two budgets, each >= 1 or `chain` (SGLang's flag value)."""
        try:
            values = [parse_budget(item) for item in text.split(",") if item.strip()]
        except ValueError:
            raise ValueError(f"expected comma-separated numbers >= 1 or {CHAIN!r}, got {text!r}") from None
        policy = cls.of_choices(values)
        if len(policy.adaptive) < 2:
            raise ValueError(f"expected at least two budgets to choose from, got {text!r}")
        return policy

    @classmethod
    def of_choices(cls, choices) -> BudgetPolicy:
        """Adaptive budgets, each once, the chain first then ascending."""
        return cls(adaptive=tuple(sorted(set(choices), key=budget_order)))

    @classmethod
    def parse_schedule(cls, text: str) -> BudgetPolicy:
        """"1:256,8:64,16:chain": from batch size 1, batch sizes ascending, budgets >= 1 or
        `chain` (SGLang's flag value)."""
        steps = []
        for item in text.split(","):
            bs, sep, budget = item.strip().partition(":")
            if not (sep and bs.strip().isdigit() and (budget.strip().isdigit() or budget.strip() == CHAIN)):
                raise ValueError(f"expected BATCH_SIZE:BUDGET steps such as 1:256,8:64,16:chain, got {text!r}")
            steps.append((int(bs), CHAIN if budget.strip() == CHAIN else int(budget)))
        if steps[0][0] != 1 or any(b <= a for (a, _), (b, _) in itertools.pairwise(steps)):
            raise ValueError(f"the schedule's batch sizes must start at 1 and ascend, got {text!r}")
        if any(budget != CHAIN and budget < 1 for _, budget in steps):
            raise ValueError(f"every budget must be >= 1, got {text!r}")
        return cls(schedule=tuple(steps))

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> BudgetPolicy:
        """From a report row's ``budget``, ``adaptive`` (list) and ``schedule`` (flag text)."""
        if row.get("adaptive"):
            return cls(adaptive=tuple(row["adaptive"]))
        if row.get("schedule"):
            return cls.parse_schedule(row["schedule"])
        return cls(budget=int(row["budget"]))

    @property
    def schedule_text(self) -> str:
        """As SGLang's flag writes it: ``1:256,8:64`` (empty for the other policies)."""
        return ",".join(f"{bs}:{budget}" for bs, budget in self.schedule)

    @property
    def slug(self) -> str:
        """The policy's part of an arm name: ``b32``, ``schedule-1x256-8x64``, ``adaptive-8-32``."""
        if self.adaptive:
            return "adaptive-" + "-".join(map(str, self.adaptive))
        if self.schedule:
            return "schedule-" + "-".join(f"{bs}x{b}" for bs, b in self.schedule)
        return f"b{self.budget}"

    @property
    def policy_label(self) -> str | None:
        """``adaptive 8/32/256`` or ``schedule 1:256,8:64``; None for a fixed budget."""
        if self.adaptive:
            return "adaptive " + "/".join(map(str, self.adaptive))
        if self.schedule:
            return f"schedule {self.schedule_text}"
        return None

    @property
    def label(self) -> str:
        """``B=32``, or the `policy_label`."""
        return self.policy_label or f"B={self.budget}"

    @property
    def widest(self) -> int:
        """The largest budget any round can take (the chain's: the block's nodes)."""
        return max(map(drafted_nodes, self.adaptive or [b for _, b in self.schedule] or [self.budget or 0]))

    @property
    def sort_key(self) -> tuple[int, ...]:
        """Fixed budgets by size, then adaptive budgets, then schedules."""
        if self.adaptive:
            return (1 << 30, *map(budget_order, self.adaptive))
        if self.schedule:
            return (1 << 31, *(v for bs, budget in self.schedule for v in (bs, budget_order(budget))))
        return (int(self.budget or 0),)

    def engine_args(self) -> dict[str, Any]:
        """The `sglang.Engine` keyword that sets this policy."""
        if self.adaptive:
            return {"speculative_ddtree_adaptive_budgets": ",".join(map(str, self.adaptive))}
        if self.schedule:
            return {"speculative_ddtree_budget_schedule": self.schedule_text}
        return {"speculative_ddtree_budget": self.budget}


def policy_of(row: Mapping[str, Any]) -> BudgetPolicy | None:
    """A report row's budget policy; None for a row without one (target-only, DFLASH)."""
    if row.get("adaptive") or row.get("schedule") or row.get("budget") is not None:
        return BudgetPolicy.of_row(row)
    return None


def policy_label(row: Mapping[str, Any]) -> str | None:
    """The row's `BudgetPolicy.policy_label`: None for a fixed budget and for no policy."""
    policy = policy_of(row)
    return policy.policy_label if policy else None


def fixed_budget(row: Mapping[str, Any]) -> bool:
    """Whether a report row is a DDTREE arm of one fixed budget: not adaptive, not a schedule,
    and not the chain control (whose rounds verify DFLASH's chain, whatever its budget says)."""
    return (
        row["algorithm"] == DDTREE and bool(row.get("budget")) and not row.get("adaptive")
        and not row.get("schedule") and not row.get("chain")
    )


_ENV_SETTING = re.compile(r"^[A-Z][A-Z0-9_]*=[^@]*$")
# ServerArgs an arm may set for its own engine: the target's attention backend (a DDTREE arm's;
# a baseline arm names its own as dflash@flashinfer) and the drafter's (DFLASH's draft worker
# reads it, and DDTREE's inherits that).
ENGINE_SETTINGS = ("attention_backend", "speculative_draft_attention_backend")


def parse_with_settings(text: str) -> tuple[Arm, dict[str, str], dict[str, str]]:
    """An arm, the environment its engine starts with and the engine keywords it adds:
    ``ddtree-b32@SGLANG_X=1@speculative_draft_attention_backend=flashinfer`` (an A/B of the
    payload's switches, a DDTREE arm's backend or the drafter's in one run), a baseline arm's backend first
    where it names one (``dflash@flashinfer@SGLANG_X=1``). ValueError names what does not parse."""
    name, *settings = text.split("@")
    if settings and "=" not in settings[0]:  # a baseline arm's backend: dflash@flashinfer@SGLANG_X=1
        name, settings = f"{name}@{settings[0]}", settings[1:]
    env, engine = {}, {}
    for setting in settings:
        key, _, value = setting.partition("=")
        if _ENV_SETTING.match(setting):
            env[key] = value
        elif key in ENGINE_SETTINGS and value:
            engine[key] = value
        else:
            raise ValueError(
                f"arm {text!r}: {setting!r} is neither ENV_NAME=VALUE nor one of {', '.join(ENGINE_SETTINGS)}=VALUE"
            )
    return Arm.parse(name), env, engine


_NAME = re.compile(
    r"^(?:(?P<plain>target-only|plain)|(?P<dflash>dflash)|(?P<baseline>nextn|eagle3)|ddtree-(?:"
    r"b(?P<budget>\d+)|adaptive-(?P<adaptive>(?:\d+|chain)(?:-(?:\d+|chain))+)"
    r"|schedule-(?P<schedule>\d+x(?:\d+|chain)(?:-\d+x(?:\d+|chain))*)"
    r")(?P<control>-chain)?)(?P<no_overlap>-no-overlap)?(?:@(?P<backend>[a-z0-9_]+))?$"
)


@dataclass(frozen=True)
class Arm:
    """An algorithm, DDTREE's budget policy, whether overlap scheduling is on, whether a
    DDTREE arm is the chain control (its tree is DFLASH's top-1 chain), and the attention
    backend of a baseline arm that runs on another than the sweep's first baseline backend
    (None: that one)."""

    algorithm: str
    policy: BudgetPolicy | None = None
    overlap: bool = True
    chain: bool = False
    backend: str | None = None

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS or (self.policy is None) == (self.algorithm == DDTREE):
            raise ValueError(f"a DDTREE arm, and only a DDTREE arm, has a budget policy: {self!r}")
        if self.chain and self.algorithm != DDTREE:
            raise ValueError(f"only a DDTREE arm can be the chain control: {self!r}")
        if self.backend is not None and self.algorithm == DDTREE:
            raise ValueError(f"a DDTREE arm runs --attention-backend, not a baseline backend: {self!r}")

    @classmethod
    def ddtree(cls, policy: BudgetPolicy | int, *, overlap: bool = True) -> Arm:
        return cls(DDTREE, BudgetPolicy.fixed(policy) if isinstance(policy, int) else policy, overlap)

    @classmethod
    def parse(cls, name: str) -> Arm:
        """An arm from its name (see the module's docstring); ValueError names the grammar."""
        found = _NAME.match(name)
        if found is None:
            raise ValueError(
                f"unknown arm {name!r} (plain, dflash, nextn, eagle3, ddtree-b<B>, "
                "ddtree-adaptive-<B1>-<B2>..., ddtree-schedule-<bs>x<B>-..., ddtree-b<B>-chain, each with "
                "-no-overlap)"
            )
        overlap, backend = not found["no_overlap"], found["backend"]
        if backend is not None and (found["plain"] or found["dflash"] or found["baseline"]) is None:
            raise ValueError(f"arm {name!r}: only a baseline arm names its attention backend (@{backend})")
        if found["plain"]:
            return cls(TARGET_ONLY, overlap=overlap, backend=backend)
        if found["dflash"]:
            return cls(DFLASH, overlap=overlap, backend=backend)
        if found["baseline"]:
            return cls(found["baseline"].upper(), overlap=overlap, backend=backend)
        if found["control"]:
            return cls(DDTREE, BudgetPolicy.fixed(int(found["budget"])), overlap=overlap, chain=True)
        if found["budget"]:
            return cls.ddtree(int(found["budget"]), overlap=overlap)
        if found["adaptive"]:
            return cls.ddtree(BudgetPolicy.parse_adaptive(found["adaptive"].replace("-", ",")), overlap=overlap)
        steps = found["schedule"].replace("x", ":").replace("-", ",")
        return cls.ddtree(BudgetPolicy.parse_schedule(steps), overlap=overlap)

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> Arm:
        """From a report row (`row`'s keys)."""
        policy = BudgetPolicy.of_row(row) if row["algorithm"] == DDTREE else None
        return cls(row["algorithm"], policy, bool(row["overlap"]), bool(row.get("chain")), row.get("backend"))

    @property
    def name(self) -> str:
        on = f"@{self.backend}" if self.backend else ""
        if self.algorithm == TARGET_ONLY:
            return TARGET_ONLY + on
        if self.algorithm == DDTREE:
            base = f"ddtree-{self.policy_or_fail.slug}"
        else:
            base = self.algorithm.lower()
        return base + (CHAIN_CONTROL if self.chain else "") + ("" if self.overlap else NO_OVERLAP) + on

    @property
    def label(self) -> str:
        """``DDTREE B=32 (no overlap)``, ``DFLASH``, ``DFLASH on triton``, ``target-only``,
        ``DDTREE B=15 chain control``."""
        on = f" on {self.backend}" if self.backend else ""
        if self.algorithm == TARGET_ONLY:
            return TARGET_ONLY + on
        if self.algorithm == DDTREE:
            base = f"DDTREE {self.policy_or_fail.label}"
        else:
            base = "EAGLE-3" if self.algorithm == EAGLE3 else self.algorithm
        return base + on + (" chain control" if self.chain else "") + ("" if self.overlap else " (no overlap)")

    @property
    def policy_or_fail(self) -> BudgetPolicy:
        assert self.policy is not None, "only DDTREE arms have a budget policy"
        return self.policy

    @property
    def reference_key(self) -> str | None:
        """The offline reference an arm is judged against: one per algorithm and fixed budget,
        whatever the scheduling (overlap changes when the host works, not which tokens are
        accepted). None for target-only, NEXTN (no offline MTP decoder), adaptive budgets and
        schedules: the offline decoder runs one budget throughout. The chain control accepts
        what DFLASH accepts."""
        if self.algorithm == DFLASH or self.chain:
            return "dflash"
        if self.algorithm == EAGLE3:
            return "eagle3"
        if self.policy is not None and self.policy.budget is not None:
            return f"ddtree-b{self.policy.budget}"
        return None

    def engine_args(self) -> dict[str, Any]:
        """The `sglang.Engine` keywords that make this arm (the drafter path aside)."""
        args: dict[str, Any] = {}
        if self.algorithm != TARGET_ONLY:
            args["speculative_algorithm"] = self.algorithm
        if self.policy is not None:
            args |= self.policy.engine_args()
        if self.algorithm in CHAIN_BASELINES:
            args |= CHAIN_DRAFT
        if not self.overlap:
            args["disable_overlap_schedule"] = True
        if self.backend is not None:
            args |= engine_keywords(self.backend)
        return args

    def engine_env(self, *, hybrid: bool) -> dict[str, str]:
        """The environment the arm's engine starts with (the payload's switches) on a target
        with (``hybrid``) or without Gated-DeltaNet layers."""
        env = dict(CHAIN_ENV) if self.chain else {}
        if hybrid and self.algorithm == DDTREE:
            env |= SERVE_FEWER_ENV
        return env

    def row(self) -> dict[str, Any]:
        """The arm's fields in a report row or plan description."""
        policy = self.policy
        return {
            "algorithm": self.algorithm,
            "budget": policy.budget if policy else None,
            "adaptive": list(policy.adaptive) if policy else [],
            "schedule": policy.schedule_text if policy else "",
            "overlap": self.overlap,
            "chain": self.chain,
            **({"backend": self.backend} if self.backend else {}),
        }


def reference_cli_args(key: str, *, draft: Path, eagle3_draft: Path | None) -> list[str]:
    """The offline reference decoder's drafter and algorithm arguments for a `reference_key`
    (``dflash``, ``ddtree-b<B>``, ``eagle3``): EAGLE-3 drafts the chain SGLang's EAGLE3 arm does,
    with its own drafter."""
    if key == "dflash":
        return ["--draft", str(draft), "--algo", "dflash"]
    if key == "eagle3":
        if eagle3_draft is None:
            raise ValueError("an eagle3 reference needs an EAGLE-3 drafter")
        return ["--draft", str(eagle3_draft), "--algo", "eagle3", "--num-steps", str(CHAIN_DRAFT["speculative_num_steps"])]
    budget = re.fullmatch(r"ddtree-b(\d+)", key)
    if budget is None:
        raise ValueError(f"no offline reference is named {key!r}")
    return ["--draft", str(draft), "--algo", "ddtree", "--budget", budget.group(1)]
