"""The dataset class and the reward function as veRL 0.9.1 loads them: `pkg://` paths from the
project's Hydra overlay, veRL's `create_rl_dataset`, `get_custom_reward_fn` and naive reward
manager, on real maze rows written by the task's preprocessor."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.slow  # real veRL imports (about 12 s per process)
torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
SEED, M = 3, 3


@pytest.fixture(scope="module")
def maze_files(tmp_path_factory):
    from vpo.task import resolve

    out = tmp_path_factory.mktemp("maze")
    train, test = resolve("maze").preprocess(str(out), {"train_size": 6, "test_size": 2})
    return Path(train), Path(test)


def _compose(method: str, *extra: str):
    from hydra import compose, initialize_config_dir

    overrides = [
        f"data.vpo.method={method}",
        f"data.vpo.m={M}",
        f"data.vpo.seed={SEED}",
        "data.filter_overlong_prompts=false",
        "data.dataloader_num_workers=0",
        *extra,
    ]
    with initialize_config_dir(config_dir=str(REPO / "verl" / "config"), version_base=None):
        return compose(config_name="vpo_trainer", overrides=overrides)


@pytest.fixture(scope="module")
def datasets(maze_files):
    """method -> (stored rows, dataset items), through veRL's create_rl_dataset."""
    import pandas as pd
    from verl.trainer.ppo.utils import create_rl_dataset

    stored = pd.read_parquet(maze_files[0]).to_dict("records")
    out = {}
    for method in ("grpo", "vpo", "multi_rlvr", "goal_cond", "random_weight", "vpo_single"):
        config = _compose(method)
        dataset = create_rl_dataset([str(maze_files[0])], config.data, tokenizer=None, processor=None)
        out[method] = (stored, [dataset[i] for i in range(len(dataset))], dataset)
    return out


def _user_text(messages) -> str:
    return [msg["content"] for msg in messages if msg["role"] == "user"][-1]


def test_dataset_class_is_loaded_by_pkg_path(datasets):
    from vpo.verl_ext.dataset import VPODataset

    assert type(datasets["vpo"][2]) is VPODataset


def test_grpo_prompts_are_unchanged(datasets):
    stored, items, _ = datasets["grpo"]
    for row, item in zip(stored, items):
        assert [dict(m) for m in item["raw_prompt"]] == [dict(m) for m in row["prompt"]]
        assert "weights" not in item["reward_model"]["ground_truth"]
        assert item["extra_info"]["num_solutions"] == 1


@pytest.mark.parametrize("method", ["vpo", "multi_rlvr"])
def test_multi_answer_methods_ask_for_m_answers(datasets, method):
    from vpo.prompts import rewrite_prompt

    stored, items, _ = datasets[method]
    for row, item in zip(stored, items):
        expected = rewrite_prompt(list(row["prompt"]), mode="multi", m=M, task="maze")
        assert item["raw_prompt"] == expected
        assert _user_text(item["raw_prompt"]) != _user_text(row["prompt"])
        assert item["extra_info"]["num_solutions"] == M
        assert "weights" not in item["reward_model"]["ground_truth"]


def test_goal_cond_shows_the_rows_weights(datasets):
    from vpo.prompts import goal_weights

    stored, items, _ = datasets["goal_cond"]
    for row, item in zip(stored, items):
        weights = goal_weights(SEED, int(row["extra_info"]["index"]), 4)
        np.testing.assert_allclose(item["reward_model"]["ground_truth"]["weights"], weights)
        text = _user_text(item["raw_prompt"])
        assert text.startswith(_user_text(row["prompt"])) and len(text) > len(_user_text(row["prompt"]))
        assert f"{weights[0]:.2f}" in text[len(_user_text(row["prompt"])) :]
        assert item["extra_info"]["num_solutions"] == 1


def test_random_weight_hides_the_weights(datasets):
    stored, items, _ = datasets["random_weight"]
    for row, item in zip(stored, items):
        assert item["raw_prompt"] == [dict(m) for m in row["prompt"]]
        assert len(item["reward_model"]["ground_truth"]["weights"]) == 4


ALL_METHODS = ("grpo", "gdpo", "maxrl", "max_at_k", "multi_rlvr", "vpo", "vpo_single", "goal_cond", "random_weight")


@pytest.mark.parametrize("method", ALL_METHODS)
def test_both_backends_build_identical_rows_with_a_non_default_alpha(maze_files, tmp_path, method):
    """The veRL dataset, as the launcher configures it, and the local trainer's rows: same prompt
    bytes, same m, same goal weights, for alpha 0.3 in the method's settings."""
    import pandas as pd
    from verl.trainer.ppo.utils import create_rl_dataset

    from vpo.config import deep_merge, load_config
    from vpo.backend import prepare_rows
    from vpo.methods import get_method
    from vpo.verl_ext.command import build_command

    cfg = load_config(str(REPO / "config.yaml"), preset="paper")
    cfg = deep_merge(cfg, {"method_settings": {method: {"alpha": 0.3}}, "task_settings": {"maze": {"m": M}}})
    command = build_command(cfg, "maze", method, SEED, tmp_path / "run", maze_files[0].parent)
    data_overrides = [o for o in command.overrides if o.startswith("data.vpo.")]
    assert "data.vpo.alpha=0.3" in data_overrides
    dataset = create_rl_dataset(
        [str(maze_files[0])], _compose(method, *data_overrides).data, tokenizer=None, processor=None
    )
    stored = pd.read_parquet(maze_files[0]).to_dict("records")
    local = prepare_rows(stored, method, M if get_method(method).multi_answer else 1, SEED, alpha=0.3)
    for i, row in enumerate(local):
        item = dataset[i]
        assert json.dumps([dict(m) for m in item["raw_prompt"]]) == json.dumps(row["prompt"])
        assert item["extra_info"]["num_solutions"] == row["extra_info"]["num_solutions"]
        assert json.dumps(list(item["reward_model"]["ground_truth"].get("weights", []))) == json.dumps(
            list(row["reward_model"]["ground_truth"].get("weights", []))
        )
    if method == "goal_cond":  # alpha reaches the weights: they differ from alpha 1's
        uniform = prepare_rows(stored, method, 1, SEED, alpha=1.0)
        assert (
            local[0]["reward_model"]["ground_truth"]["weights"] != uniform[0]["reward_model"]["ground_truth"]["weights"]
        )


def test_veRL_collate_accepts_rewritten_rows(datasets):
    from verl.utils.dataset.rl_dataset import collate_fn

    batch = collate_fn(datasets["vpo"][1][:4])
    assert len(batch["raw_prompt"]) == 4 and batch["dummy_tensor"].shape[0] == 4


@pytest.fixture(scope="module")
def tokenizer(datasets):
    """A real byte-level BPE tokenizer (no hub download), trained on the maze prompts."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    texts = [_user_text(item["raw_prompt"]) for item in datasets["vpo"][1]]
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<pad>", "<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


def _reward_items(method, datasets, tokenizer):
    """(DataProto of one rollout, response text) per row: demonstrations of mixed quality + garbage."""
    from verl import DataProto

    from vpo.task import resolve

    task = resolve("maze")
    rng = np.random.default_rng(0)
    _, items, _ = datasets[method]
    out = []
    for i, item in enumerate(items):
        n_answers = item["extra_info"]["num_solutions"]
        text = "no route here" if i == len(items) - 1 else task.demonstration(item, rng, n_answers)
        ids = tokenizer.encode(text) + [tokenizer.eos_token_id]
        responses = torch.tensor([ids + [tokenizer.pad_token_id] * 3])
        prompts = torch.tensor([[5, 6, 7]])
        attention = torch.cat([torch.ones(1, 3), torch.ones(1, len(ids)), torch.zeros(1, 3)], dim=1).long()
        non_tensors = {
            key: np.array([item[key]], dtype=object) for key in ("data_source", "reward_model", "extra_info")
        }
        data = DataProto.from_dict(
            tensors={"prompts": prompts, "responses": responses, "attention_mask": attention}, non_tensors=non_tensors
        )
        out.append((data, text))
    return out


@pytest.fixture()
def event_loop_of_its_own():
    """veRL's reward manager binds to the thread's current event loop; an earlier test in this process
    (asyncio.run) may have closed it, so each test gets a fresh one."""
    import asyncio

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


@pytest.mark.parametrize("method", ["grpo", "vpo", "goal_cond"])
def test_reward_under_naive_reward_manager(datasets, tokenizer, method, event_loop_of_its_own):
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from vpo.reward import compute_score as engine_score

    config = _compose(method)
    reward_fn = get_custom_reward_fn(config)
    assert reward_fn is not None, "reward.custom_reward_function.path did not load"
    manager = get_reward_manager_cls("naive")(config, tokenizer, reward_fn)
    key_sets, scores = [], []
    for data, text in _reward_items(method, datasets, tokenizer):
        result = manager.loop.run_until_complete(manager.run_single(data))  # the loop veRL bound it to
        info = result["reward_extra_info"]
        key_sets.append(tuple(sorted(info)))
        item = data.non_tensor_batch
        direct = engine_score("maze", text, item["reward_model"][0]["ground_truth"], dict(item["extra_info"][0]))
        assert result["reward_score"] == direct["score"] == info["score"]
        matrix = np.asarray(json.loads(info["sub_scores"]))
        expected_m = M if method == "vpo" else 1
        assert matrix.shape == (expected_m, 4)
        scores.append(result["reward_score"])
    assert len(set(key_sets)) == 1, f"reward keys differ between rows: {set(key_sets)}"
    assert {"score", "sub_scores", "acc"} <= set(key_sets[0])
    assert scores[-1] == 0.0  # unparseable text scores zero, without raising
    assert max(scores) > 0.0  # the demonstrations include routes that reach the exit


@pytest.mark.parametrize("task, source", [("musique", "musique"), ("eureqa", "eureqa"), ("tool", "tool")])
def test_dataset_task_parquet_loads_in_rlhf_dataset(tmp_path, task, source):
    """Each dataset task's preprocessed fixture, rewritten for a multi-answer method, in veRL's loader."""
    from verl.trainer.ppo.utils import create_rl_dataset

    from vpo.task import resolve

    train, _ = resolve(task).preprocess(str(tmp_path), {"path": str(REPO / "tests" / "fixtures" / source)})
    dataset = create_rl_dataset([str(train)], _compose("vpo").data, tokenizer=None, processor=None)
    item = dataset[0]
    assert item["extra_info"]["num_solutions"] == M and "<response_1>" in item["raw_prompt"][-1]["content"]
