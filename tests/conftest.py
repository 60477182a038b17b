"""Shared fixtures. The embedded-backend fixtures build a real (tiny) maze split and base model once
per session, so the trainer, generation and evaluation tests run real code in seconds."""

from __future__ import annotations

import pytest

# config.yaml's local_trainer block with a model of a few thousand parameters and a handful of
# warm-start steps: enough to exercise every code path (format, sampling, losses, checkpoints), not
# to learn the task.
TINY_CHANGES = {
    "hidden_size": 32,
    "num_layers": 1,
    "num_heads": 1,
    "intermediate_size": 64,
    "max_positions": 512,
    "warm_start_steps": 6,
    "warm_start_batch": 4,
    "steps": 4,
    "prompts_per_step": 2,
    "rollouts_per_prompt": 3,
    "ppo_mini_batches": 2,
    "max_new_tokens": {"single": 16, "multi": 40, "goal": 16},
    "checkpoint_every": 2,
    "keep_checkpoints": 2,
    "threads": 1,
}


def local_trainer_block(**changes) -> dict:
    """config.yaml's local_trainer block (the file's own values, no preset) with `changes`."""
    from pathlib import Path

    import yaml

    block = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())["local_trainer"]
    return {**block, **changes}


TINY_LOCAL_TRAINER = local_trainer_block(**TINY_CHANGES)


@pytest.fixture(autouse=True)
def method_table():
    """The method table without variants after every test: reading a config registers its variants
    (config.yaml has some), and the next test must not depend on what an earlier one read (code that
    needs a variant reads its config, which registers it again)."""
    from vpo.methods import METHODS

    yield
    for name in [name for name, method in METHODS.items() if method.base is not None]:
        del METHODS[name]


@pytest.fixture(scope="session")
def tiny_local_settings():
    from vpo.settings import LocalTrainerSettings

    return LocalTrainerSettings.from_dict(TINY_LOCAL_TRAINER)


@pytest.fixture(scope="session")
def tiny_maze_data(tmp_path_factory):
    """A maze split of 12 train and 3 test rows, written by the real preprocessor."""
    from vpo.task import resolve

    out = tmp_path_factory.mktemp("maze_data")
    resolve("maze").preprocess(str(out), {"train_size": 12, "test_size": 3})
    return out


def _tiny_base(tmp_path_factory, data, settings, mode):
    from vpo.local.base import build_base_model

    out = tmp_path_factory.mktemp("base") / mode
    build_base_model("maze", str(data), str(out), settings, mode=mode, m=3, seed=0)
    return out


@pytest.fixture(scope="session")
def tiny_base_model(tmp_path_factory, tiny_maze_data, tiny_local_settings):
    """A warm-started tiny base model directory (Hugging Face format) for single-answer maze prompts."""
    return _tiny_base(tmp_path_factory, tiny_maze_data, tiny_local_settings, "single")


@pytest.fixture(scope="session")
def tiny_multi_base_model(tmp_path_factory, tiny_maze_data, tiny_local_settings):
    """The same for multi-answer prompts (what vpo and multi_rlvr train from)."""
    return _tiny_base(tmp_path_factory, tiny_maze_data, tiny_local_settings, "multi")


def pytest_collection_modifyitems(config, items):
    """The tests that take minutes first, then the slow ones (stable: file order otherwise kept): with one
    worker per core (make test), the longest (veRL on CPU) then starts at once and runs beside the rest
    instead of ending the run alone."""
    items.sort(key=lambda item: (item.get_closest_marker("minutes") is None, item.get_closest_marker("slow") is None))
