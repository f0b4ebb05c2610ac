"""DDTREE: what a round verifies (its shape), and the budget policy that picks it.

A shape is
- a tree budget B (an int >= 1): the first B nodes, in pop order, of the best-first tree the
  drafter's block grows into, verified at width max(B + 1, block);
- ``CHAIN``: the drafter's top-1 token at every position of the block, one path of block - 1
  nodes, verified at width block: what DFLASH verifies (block 16: the root and 15 drafted). The
  best-first tree cut to block - 1 nodes is not the chain: it branches wherever a second-best
  token outscores a deeper top-1 prefix.

A policy is one of
    fixed     one shape every round           --speculative-ddtree-budget 32
    schedule  a shape per batch size          --speculative-ddtree-budget-schedule 1:64,17:chain
    adaptive  each round picks a shape        --speculative-ddtree-adaptive-budgets chain,8,32
              (ddtree_adaptive.AdaptiveBudget)
and ``SGLANG_DDTREE_TREE_SHAPE=chain`` makes every round verify the chain, whatever the flags.

The spec hook sizes the target's verify from the policy; the worker asks it what the tree
stage builds at a batch size (``drafts_at``) and what a round verifies (``shape_at``), and warms
every round it can run before serving (``rounds``, ddtree_warmup); the graph runner captures a
verify width per shape. The tool side (ddtree_overlay/bench/arms.py) parses and
labels the same flag grammar.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, Tuple, Union

CHAIN = "chain"  # the chain's spelling in the flags, the profile and the logs
Shape = Union[int, str]  # a tree budget B >= 1, or CHAIN


def num_verify_tokens_for(budget: int, block_size: int) -> int:
    """Verify width for a budget.

    The DFlash draft block occupies ``block_size`` KV slots after the prefix and
    DFlash's over-allocation reserves ``2 * speculative_num_draft_tokens`` slots,
    so the width never goes below the block size.
    """
    return max(int(budget) + 1, int(block_size))


def max_accept_width(budget: int, block_size: int) -> int:
    """Longest accepted path, root included: depth is capped by the block."""
    return min(int(budget), int(block_size) - 1) + 1


def is_shape_text(text: str) -> bool:
    """A budget (digits; >= 1 is checked apart) or ``chain``."""
    return text.isdigit() or text == CHAIN


def parse_shape(text: str) -> Shape:
    """``"32"`` -> 32, ``"chain"`` -> CHAIN (after ``is_shape_text``)."""
    return CHAIN if text == CHAIN else int(text)


def shape_order(shape: Shape) -> Tuple[int, int]:
    """Sort key: the chain first, then budgets ascending."""
    return (0, 0) if shape == CHAIN else (1, int(shape))


def drafted_nodes(shape: Shape, block_size: int) -> int:
    """Drafted nodes a round of this shape verifies, root excluded."""
    return int(block_size) - 1 if shape == CHAIN else int(shape)


def shape_verify_tokens(shape: Shape, block_size: int) -> int:
    """The verify width of a shape: the chain's is the block."""
    return num_verify_tokens_for(drafted_nodes(shape, block_size), block_size)


class DraftStage(NamedTuple):
    """What a round's tree stage builds from the draft block: the best-first tree of
    ``tree_budget`` nodes (0: none) and, with ``chain``, the chain."""

    tree_budget: int
    chain: bool

    def top_k(self, vocab_size: int) -> int:
        """Top-K per draft position the builds need (the chain reads the top-1)."""
        return max(min(self.tree_budget, int(vocab_size)), 1)


@dataclass(frozen=True)
class BudgetPolicy:
    """Fixed or schedule: ``steps`` of (smallest batch size, shape), ascending from batch size 1
    (fixed: one step); a batch uses the last step at or below it. Adaptive: ``choices``, the
    shapes a round picks among, chain first then budgets ascending."""

    steps: Tuple[Tuple[int, Shape], ...] = ()
    choices: Tuple[Shape, ...] = ()

    def __post_init__(self) -> None:
        if bool(self.steps) == bool(self.choices):
            raise ValueError(f"a DDTREE budget policy has steps or choices: {self!r}")

    @classmethod
    def fixed(cls, shape: Shape) -> "BudgetPolicy":
        return cls(steps=((1, shape),))

    @classmethod
    def parse_schedule(cls, text: str) -> "BudgetPolicy":
        """``"1:256,8:64,16:chain"``: B = 256 for 1-7 requests, 64 for 8-15, the chain from 16."""
        steps = []
        for item in str(text).split(","):
            bs, sep, shape = (part.strip() for part in item.partition(":"))
            if not sep or not bs.isdigit() or not is_shape_text(shape):
                raise ValueError(
                    f"DDTREE budget schedule {text!r}: {item.strip()!r} is not BATCH_SIZE:BUDGET "
                    f"(a budget or {CHAIN!r})."
                )
            steps.append((int(bs), parse_shape(shape)))
        if steps[0][0] != 1:
            raise ValueError(f"DDTREE budget schedule {text!r} must start at batch size 1.")
        if any(b <= a for (a, _), (b, _) in zip(steps, steps[1:], strict=False)):
            raise ValueError(f"DDTREE budget schedule {text!r}: batch sizes must ascend.")
        if any(shape != CHAIN and shape < 1 for _, shape in steps):
            raise ValueError(f"DDTREE budget schedule {text!r}: every budget must be >= 1.")
        return cls(steps=tuple(steps))

    @classmethod
    def parse_adaptive(cls, text: str) -> "BudgetPolicy":
        """``"chain,16,64,256"``: at least two shapes (each once), the chain first then budgets
        ascending."""
        items = [item.strip() for item in str(text).split(",")]
        if not all(is_shape_text(item) for item in items):
            raise ValueError(
                f"DDTREE adaptive budgets {text!r}: expected budgets or {CHAIN!r} separated by "
                "commas, e.g. 'chain,16,64,256'."
            )
        shapes = sorted({parse_shape(item) for item in items}, key=shape_order)
        if any(shape != CHAIN and shape < 1 for shape in shapes):
            raise ValueError(f"DDTREE adaptive budgets {text!r}: every budget must be >= 1.")
        if len(shapes) < 2:
            raise ValueError(
                f"DDTREE adaptive budgets {text!r}: give at least two budgets to choose from."
            )
        return cls(choices=tuple(shapes))

    @classmethod
    def from_flags(
        cls,
        *,
        budget: Optional[int],
        schedule: Optional[str],
        adaptive: Optional[str],
        default_budget: int,
        tree_shape: str = "tree",
    ) -> "BudgetPolicy":
        """The policy the flags name: at most one of them (none: ``default_budget``), and
        ``tree_shape`` (SGLANG_DDTREE_TREE_SHAPE) ``chain`` for the chain every round."""
        given = [
            flag
            for flag, value in (
                ("--speculative-ddtree-budget", budget),
                ("--speculative-ddtree-budget-schedule", schedule),
                ("--speculative-ddtree-adaptive-budgets", adaptive),
            )
            if value is not None
        ]
        if len(given) > 1:
            raise ValueError(f"DDTREE takes one of {' / '.join(given)}, not several.")
        if schedule is not None:
            policy = cls.parse_schedule(schedule)
        elif adaptive is not None:
            policy = cls.parse_adaptive(adaptive)
        else:
            budget = default_budget if budget is None else int(budget)
            if budget < 1:
                raise ValueError(f"DDTREE requires --speculative-ddtree-budget >= 1, got {budget}.")
            policy = cls.fixed(budget)
        return cls.fixed(CHAIN) if tree_shape == CHAIN else policy

    @classmethod
    def of_resolved_flags(
        cls,
        *,
        budget: int,
        schedule: Optional[str],
        adaptive: Optional[str],
        tree_shape: str = "tree",
    ) -> "BudgetPolicy":
        """The policy of server args the spec hook has resolved: it checked the flags, then set
        the budget to the widest shape's nodes, so a schedule or adaptive list is the policy."""
        given = schedule is not None or adaptive is not None
        return cls.from_flags(
            budget=None if given else budget,
            schedule=schedule,
            adaptive=adaptive,
            default_budget=budget,
            tree_shape=tree_shape,
        )

    @property
    def is_adaptive(self) -> bool:
        return bool(self.choices)

    @property
    def shapes(self) -> Tuple[Shape, ...]:
        """Every shape a round may verify, chain first then budgets ascending."""
        return self.choices or tuple(sorted({s for _, s in self.steps}, key=shape_order))

    def shape_at(self, batch_size: int) -> Shape:
        """A fixed policy's or schedule's shape at this batch size."""
        if self.is_adaptive:
            raise ValueError("DDTREE adaptive budgets choose a shape per round, not per batch size.")
        shape = self.steps[0][1]
        for smallest, step_shape in self.steps:
            if batch_size >= smallest:
                shape = step_shape
        return shape

    def drafts_at(self, batch_size: int) -> DraftStage:
        """What the tree stage builds at this batch size. Adaptive: the widest tree (each tree
        choice is its first nodes) and the chain when it is a choice."""
        shapes = self.choices or (self.shape_at(batch_size),)
        trees = [int(s) for s in shapes if s != CHAIN]
        return DraftStage(max(trees, default=0), CHAIN in shapes)

    def rounds(self) -> Tuple[Tuple[DraftStage, Shape], ...]:
        """Every (tree stage, shape) a round may run: adaptive, each choice verified from the one
        tree stage; a fixed policy or a schedule, each step's shape from its own."""
        if self.is_adaptive:
            return tuple((self.drafts_at(1), shape) for shape in self.choices)
        return tuple(dict.fromkeys((self.drafts_at(bs), shape) for bs, shape in self.steps))

    def top_k(self, vocab_size: int) -> int:
        """The widest top-K any batch size's tree stage needs."""
        return max(self.drafts_at(bs).top_k(vocab_size) for bs in self._batch_size_steps())

    def widest_nodes(self, block_size: int) -> int:
        return max(drafted_nodes(s, block_size) for s in self.shapes)

    def widest_verify_tokens(self, block_size: int) -> int:
        return max(shape_verify_tokens(s, block_size) for s in self.shapes)

    def accept_width(self, block_size: int) -> int:
        """Longest accepted path of any round, root included."""
        return max_accept_width(self.widest_nodes(block_size), block_size)

    @property
    def label(self) -> str:
        """As the flags write it: ``32``, ``1:64,17:chain``, ``adaptive chain/8/32``."""
        if self.is_adaptive:
            return "adaptive " + "/".join(map(str, self.choices))
        if len(self.steps) == 1:
            return str(self.steps[0][1])
        return ",".join(f"{bs}:{shape}" for bs, shape in self.steps)

    def _batch_size_steps(self) -> Tuple[int, ...]:
        return tuple(bs for bs, _ in self.steps) or (1,)
