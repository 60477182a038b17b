"""The method table: which estimator each training method uses and what it is given.

A method is data, not code: the estimator (a key of `vpo.advantage.ESTIMATORS`), whether a rollout
holds m answers, the shape of the reward the estimator sees, and the prompt rewrite. Both trainers,
the reward function and the evaluation read this one table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

_REWARD_KINDS = ("scalar", "channels", "matrix", "sum", "weighted", "keyed")
PROMPT_KINDS = ("single", "multi", "goal")
UNSTYLED = ("#555555", "-", "o")  # a line's colour, line style and marker when no method gives them


@dataclass(frozen=True)
class Method:
    name: str  # method-facing name, used in config.yaml, paths and figures
    estimator: str  # key of vpo.advantage.ESTIMATORS
    multi_answer: bool  # True: m answers per rollout (m from the task settings); False: one answer
    reward: str  # what the estimator is given: one of _REWARD_KINDS (see the table below)
    prompt: str  # prompt rewrite: "single" (as is), "multi" (ask for m answers), "goal" (w shown)
    description: str = ""  # one line for tables and --help
    # which entry of task_settings' max_prompt_length / max_response_length the method trains with: its
    # prompt kind, unless the authors route it through another method's data path (None: `prompt`)
    lengths: str | None = None
    label: str = ""  # its name in figures and tables ("" : `name`)
    # its look in every figure: colour, line style, marker (Okabe-Ito colours, told apart with the
    # common colour-vision deficiencies; style and marker separate the lines in greyscale too)
    style: tuple[str, str, str] = UNSTYLED
    base: str | None = None  # a variant (config.yaml `variants`): the table method it varies

    def __post_init__(self) -> None:
        if self.reward not in _REWARD_KINDS:
            raise ValueError(f"method {self.name!r}: reward {self.reward!r} is not one of {_REWARD_KINDS}")
        for kind in (self.prompt, self.length_kind):
            if kind not in PROMPT_KINDS:
                raise ValueError(f"method {self.name!r}: prompt kind {kind!r} is not one of {PROMPT_KINDS}")

    @property
    def length_kind(self) -> str:
        return self.lengths or self.prompt


# reward kinds:
#   scalar    the task's scalar score of the single answer
#   channels  the k objective channels of the single answer (one advantage per channel)
#   matrix    the (m, k) matrix of the rollout's answers (m = 1 for vpo_single)
#   sum       the task scalar summed over the rollout's m answers (Multi-RLVR)
#   weighted  w . channels, w ~ Dir(1) fixed per training row
#   keyed     the task scalar of the single answer and the rollout's strategy key (`Task.strategy_key`)
# Looks: VPO is blue and GRPO vermillion, as in the paper; VPO (m=1) is VPO's lighter blue, dashed.
_TABLE = (
    Method(
        "grpo", "grpo", False, "scalar", "single", "GRPO on the task scalar", label="GRPO", style=("#D55E00", "-", "o")
    ),
    Method(
        "gdpo",
        "gdpo",
        False,
        "channels",
        "single",
        "GDPO: per-objective group z-scores, summed, batch-whitened",
        label="GDPO",
        style=("#CC79A7", "--", "v"),
    ),
    Method(
        "maxrl",
        "maxrl",
        False,
        "scalar",
        "single",
        "MaxRL: group-mean-normalised advantage",
        label="MaxRL",
        style=("#8C6D00", "-.", "P"),
    ),
    Method(
        "max_at_k",
        "max_at_k",
        False,
        "scalar",
        "single",
        "Max@k: unbiased gradient of E[best of k]",
        label="Max@k",
        style=("#E69F00", "--", "s"),
    ),
    Method(
        "multi_rlvr",
        "grpo",
        True,
        "sum",
        "multi",
        "Multi-RLVR: m answers, GRPO on the summed scalar",
        label="Multi-RLVR",
        style=("#009E73", "-.", "^"),
    ),
    Method(
        "vpo",
        "vpo",
        True,
        "matrix",
        "multi",
        "VPO: m answers, best member under random weightings",
        label="VPO",
        style=("#0072B2", "-", "D"),
    ),
    Method(
        "vpo_single",
        "vpo_single",
        False,
        "matrix",
        "single",
        "VPO estimator on one answer per rollout",
        label="VPO (m=1)",
        style=("#56B4E9", "--", "d"),
    ),
    Method(
        "goal_cond",
        "grpo",
        False,
        "weighted",
        "goal",
        "goal-conditioned GRPO: w . channels, w in the prompt",
        label="Goal-cond. GRPO",
        style=("#000000", ":", "X"),
    ),
    # the authors run random-weight GRPO as goal-conditioned GRPO with the weights kept out of the prompt
    # (PAPER_REPRO.md section 1, `++data.random_reward_only=True`), so it gets the goal-conditioned lengths
    Method(
        "random_weight",
        "grpo",
        False,
        "weighted",
        "single",
        "GRPO on w . channels, w hidden from the prompt",
        lengths="goal",
        label="Random-weight GRPO",
        style=("#999999", ":", "*"),
    ),
    # set RL with the polychromic objective (Poly-EPO, vpo/set_rl.py) and the additive diversity bonus it is
    # compared with; both read each rollout's strategy key beside its scalar
    Method(
        "poly_epo",
        "set_rl",
        False,
        "keyed",
        "single",
        "Poly-EPO: set RL on mean reward x distinct strategies of n-subsets",
        label="Poly-EPO",
        style=("#882255", "-", "h"),
    ),
    Method(
        "grpo_div",
        "grpo_div",
        False,
        "keyed",
        "single",
        "GRPO+DIV: GRPO on reward + lambda x strategy novelty",
        label="GRPO+DIV",
        style=("#44AA99", "--", "p"),
    ),
)

METHODS: dict[str, Method] = {m.name: m for m in _TABLE}


def get_method(name: str | Method) -> Method:
    """Look a method up by name (a Method is returned as is); unknown names raise ValueError."""
    if isinstance(name, Method):
        return name
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}") from None


def register_variant(name: str, base: str, label: str | None = None) -> Method:
    """Add a variant to the table: method `base` under `name` (its own cells, runs and label), with
    the settings config.yaml's `variants.<name>` gives it. Every process that reads the config
    registers its variants (`vpo.config`); the config read last defines a variant's name."""
    parent = get_method(base)
    if parent.base is not None:
        raise ValueError(f"variant {name!r}: {base!r} is itself a variant; vary a method of the table")
    if name in METHODS and METHODS[name].base is None:
        raise ValueError(f"variant {name!r} is already a method of the table; choose another name")
    METHODS[name] = dataclasses.replace(parent, name=name, base=parent.name, label=label or f"{parent.label} ({name})")
    return METHODS[name]
