"""What veRL imports in every process, Ray workers included (the `verl.plugins` entry point and
VERL_USE_EXTERNAL_MODULES=vpo.verl_ext.plugin): registers the estimators and the `vpo_sync` trainer.
Importing it requires veRL; nothing else in vpo.verl_ext registers anything on import."""

from vpo.verl_ext.estimators import register_estimators
from vpo.verl_ext.trainer import register_trainer

register_estimators()
register_trainer()
