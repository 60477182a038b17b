"""The veRL 0.9.1 side of the project, extending veRL from outside. Importing this package, or the
launcher, registers nothing in veRL; only `plugin` does.

    plugin.py      imported by veRL in every process (`verl.plugins` entry point and
                   VERL_USE_EXTERNAL_MODULES): registers the estimators and the trainer
    estimators.py  the advantage estimators veRL lacks (vpo, vpo_single, maxrl, max_at_k,
                   multi_rlvr, gdpo_v1), the staged rollouts they read, the step's metrics
    trainer.py     the v1 trainer `vpo_sync`, which stages each rollout's reward extras
    dataset.py     the dataset class (`data.custom_cls`): prompts rewritten per method
    reward.py      the reward function (`reward.custom_reward_function`)
    launcher.py    one cell of config.yaml -> a veRL job (`vpo train --backend verl`)
    preflight.py   the checks that fail a bad cell before Ray starts
"""

from pathlib import Path

PLUGIN_MODULE = "vpo.verl_ext.plugin"  # what veRL imports to register the estimators and trainer
TRAINER_MODE = "vpo_sync"  # trainer.v1.trainer_mode of the trainer in trainer.py
VERL_CONFIG_DIR = Path(__file__).resolve().parents[2] / "verl" / "config"  # the Hydra overlay
CONFIG_NAME = "vpo_trainer"  # its top file, inheriting veRL's ppo_trainer
