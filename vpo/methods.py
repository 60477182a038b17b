"""The method table: which estimator each training method uses and what it is given.

A method is data, not code: the estimator (a key of `vpo.advantage.ESTIMATORS`), whether a rollout
holds m answers, the shape of the reward the estimator sees, and the prompt rewrite. Both trainers,
the reward function and the evaluation read this one table.
"""

from __future__ import annotations

from dataclasses import dataclass

REWARD_KINDS = ("scalar", "channels", "matrix", "sum", "weighted")
PROMPT_KINDS = ("single", "multi", "goal")


@dataclass(frozen=True)
class Method:
    name: str  # method-facing name, used in config.yaml, paths and figures
    estimator: str  # key of vpo.advantage.ESTIMATORS
    multi_answer: bool  # True: m answers per rollout (m from the task settings); False: one answer
    reward: str  # what the estimator is given: one of REWARD_KINDS (see the table below)
    prompt: str  # prompt rewrite: "single" (as is), "multi" (ask for m answers), "goal" (w shown)
    description: str = ""  # one line for tables and --help
    # which entry of task_settings' max_prompt_length / max_response_length the method trains with: its
    # prompt kind, unless the authors route it through another method's data path (None: `prompt`)
    lengths: str | None = None

    def __post_init__(self) -> None:
        if self.reward not in REWARD_KINDS:
            raise ValueError(f"method {self.name!r}: reward {self.reward!r} is not one of {REWARD_KINDS}")
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
_TABLE = (
    Method("grpo", "grpo", False, "scalar", "single", "GRPO on the task scalar"),
    Method("gdpo", "gdpo", False, "channels", "single", "GDPO: per-objective group z-scores, summed, batch-whitened"),
    Method("maxrl", "maxrl", False, "scalar", "single", "MaxRL: group-mean-normalised advantage"),
    Method("max_at_k", "max_at_k", False, "scalar", "single", "Max@k: unbiased gradient of E[best of k]"),
    Method("multi_rlvr", "grpo", True, "sum", "multi", "Multi-RLVR: m answers, GRPO on the summed scalar"),
    Method("vpo", "vpo", True, "matrix", "multi", "VPO: m answers, best member under random weightings"),
    Method("vpo_single", "vpo_single", False, "matrix", "single", "VPO estimator on one answer per rollout"),
    Method("goal_cond", "grpo", False, "weighted", "goal", "goal-conditioned GRPO: w . channels, w in the prompt"),
    # the authors run random-weight GRPO as goal-conditioned GRPO with the weights kept out of the prompt
    # (PAPER_REPRO.md section 1, `++data.random_reward_only=True`), so it gets the goal-conditioned lengths
    Method("random_weight", "grpo", False, "weighted", "single", "GRPO on w . channels, w hidden from the prompt",
           lengths="goal"),
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
