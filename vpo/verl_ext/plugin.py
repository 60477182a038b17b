"""What veRL imports in every process, Ray workers included (the `verl.plugins` entry point and
VERL_USE_EXTERNAL_MODULES=vpo.verl_ext.plugin): registers the estimators and the `vpo_sync` trainer,
and, only in a job started with VERL_PLATFORM=cpu, the CPU platform and the transformers rollout
(first: importing the trainer makes veRL look its platform up). Importing it requires veRL; nothing
else in vpo.verl_ext registers anything on import."""

import os

if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    from vpo.verl_ext.cpu import enable

    enable()

from vpo.verl_ext.estimators import register_estimators  # noqa: E402
from vpo.verl_ext.trainer import register_trainer  # noqa: E402

register_estimators()
register_trainer()
