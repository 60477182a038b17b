"""What veRL imports in every process, Ray workers included (the `verl.plugins` entry point and
VERL_USE_EXTERNAL_MODULES=vpo.verl_ext.plugin): registers the estimators and the `vpo_sync` trainer,
and, only in a job started with VERL_PLATFORM=cpu, the CPU platform and the transformers rollout
(first: importing the trainer makes veRL look its platform up). Importing it requires veRL; nothing
else in vpo.verl_ext registers anything on import.

veRL 0.9.1 patches TRL's PPO value-head model whenever TRL is installed (`is_trl_available`, at model
initialisation); TRL 1.x, installed beside veRL for `vpo.trl_ext`, has no PPO and that import fails. The
plugin runs before those modules load (it is imported with veRL) and tells them TRL is available only
when it has the value-head model, which no run of this project uses (no critic)."""

import importlib.util
import os
from pathlib import Path


def _trl_has_value_head() -> bool:
    """Whether the installed TRL provides `AutoModelForCausalLMWithValueHead` (read from its files,
    without importing TRL: a plain import takes seconds in every worker)."""
    spec = importlib.util.find_spec("trl")
    if spec is None or spec.origin is None:
        return False
    root = Path(spec.origin).parent
    return (root / "experimental" / "ppo").is_dir() or "AutoModelForCausalLMWithValueHead" in (
        root / "__init__.py"
    ).read_text()


import verl.utils.import_utils as _verl_imports  # noqa: E402

_verl_imports.is_trl_available = _trl_has_value_head

if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    from vpo.verl_ext.cpu import enable

    enable()

from vpo.verl_ext.estimators import register_estimators  # noqa: E402
from vpo.verl_ext.trainer import register_trainer  # noqa: E402

register_estimators()
register_trainer()
