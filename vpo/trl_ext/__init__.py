"""VPO and every method of the method table in TRL's `GRPOTrainer` (`vpo.trl_ext.trainer`).

TRL turns one scalar per reward function into advantages inside `_generate_and_score_completions`;
`EstimatorGRPOTrainer` keeps everything else TRL does (generation, reference and old log-probabilities,
loss, optimizer, logging, checkpoints) and replaces only those advantages with the estimator the method
table names (`vpo.method_advantage.advantage_for_method`), fed with each completion's (m, k) reward matrix.
`grpo_arguments` maps the local trainer's settings onto `GRPOConfig` so that TRL takes veRL's update.

Supported: TRL 1.16.x (the subclass overrides a private method of that release and reads the keys of
what it returns); any other version stops with one line naming it.
"""

from __future__ import annotations

SUPPORTED_TRL = "1.16"  # major.minor of the TRL releases this extension runs with (tests/test_trl_ext.py)


def require_supported_trl() -> None:
    """Raise RuntimeError (one line) unless the installed TRL is a supported release."""
    try:
        import trl
    except ImportError:
        raise RuntimeError(f"vpo.trl_ext needs TRL {SUPPORTED_TRL}.x: pip install -e '.[trl]'") from None
    if ".".join(trl.__version__.split(".")[:2]) != SUPPORTED_TRL:
        raise RuntimeError(
            f"vpo.trl_ext runs with TRL {SUPPORTED_TRL}.x and this environment has TRL "
            f"{trl.__version__}: pip install 'trl=={SUPPORTED_TRL}.0'"
        )
