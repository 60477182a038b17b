"""`vpo preprocess --task maze`: the files, their schema, bad settings, and loading them with
veRL 0.9.1's RLHFDataset (chat template applied by a tokenizer built here, no downloads)."""

from __future__ import annotations

import json
import os
from collections import deque
from pathlib import Path

import pandas as pd
import pytest

from vpo.cli import main as vpo_main
from vpo.prompts import prepare_row
from vpo.reward import compute_score

REPO = Path(__file__).resolve().parent.parent
GT_KEYS = {"grid_text", "start", "end", "max_steps", "num_gold", "num_diamond", "num_lava", "score_mode"}
EXTRA_KEYS = {
    "split",
    "index",
    "task_id",
    "seed",
    "d_safe",
    "gold_corner",
    "diam_corner",
    "bonus_cell",
    "via_gold",
    "via_diam",
    "via_center",
    "both_corners_detour",
    "prompt_fields",
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "maze"
    rc = vpo_main(
        [
            "preprocess",
            "--task",
            "maze",
            "--out",
            str(out),
            "--train-size",
            "40",
            "--test-size",
            "8",
            "--score-mode",
            "linear",
        ]
    )
    assert rc == 0
    return out


def shortest_route(gt) -> str:
    """BFS over the grid text (walls only) from start to end, as move words."""
    grid = [line.split() for line in gt["grid_text"].split("\n")]
    start, end = tuple(gt["start"]), tuple(gt["end"])
    prev, queue = {start: None}, deque([start])
    steps = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}
    while queue:
        cell = queue.popleft()
        for name, (dr, dc) in steps.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < 9 and 0 <= nxt[1] < 9 and nxt not in prev and grid[nxt[0]][nxt[1]] != "#":
                prev[nxt] = (cell, name)
                queue.append(nxt)
    moves, cell = [], end
    while prev[cell]:
        cell, name = prev[cell]
        moves.append(name)
    return " ".join(reversed(moves))


def test_preprocess_writes_both_splits_in_the_verl_schema(data_dir):
    assert sorted(os.listdir(data_dir)) == ["test.parquet", "train.parquet"]  # no temporary leftovers
    train, test = pd.read_parquet(data_dir / "train.parquet"), pd.read_parquet(data_dir / "test.parquet")
    assert (len(train), len(test)) == (40, 8)
    for split, frame in (("train", train), ("test", test)):
        assert list(frame.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        assert set(frame["data_source"]) == {"maze"} and set(frame["ability"]) == {"spatial"}
        assert frame["extra_info"].map(lambda e: e["split"]).eq(split).all()
        assert frame["extra_info"].map(lambda e: e["index"]).tolist() == list(range(len(frame)))
        for _, row in frame.iterrows():
            assert [m["role"] for m in row["prompt"]] == ["user"]
            assert row["reward_model"]["style"] == "rule"
            gt = row["reward_model"]["ground_truth"]
            assert set(gt) == GT_KEYS and gt["score_mode"] == "linear"
            assert set(row["extra_info"]) == EXTRA_KEYS
            assert f"You have {gt['max_steps']} steps." in row["prompt"][0]["content"]
    seeds = lambda f: [e["seed"] for e in f["extra_info"]]  # noqa: E731
    assert seeds(train)[0] >= 42 and seeds(test)[0] >= 4242 and not set(seeds(train)) & set(seeds(test))


def test_rows_read_back_score_through_the_reward(data_dir):
    frame = pd.read_parquet(data_dir / "test.parquet")
    for _, row in frame.iterrows():
        gt = row["reward_model"]["ground_truth"]
        route = shortest_route({**gt, "start": list(gt["start"]), "end": list(gt["end"])})
        result = compute_score(row["data_source"], f"<answer>{route}</answer>", gt, row["extra_info"])
        assert result["completion"] == 1.0  # the shortest path always fits the budget


def test_first_rows_are_the_authors_first_mazes(data_dir):
    fixtures = {
        m["seed"]: m for m in json.loads((REPO / "tests" / "fixtures" / "maze_seeds.json").read_text())["mazes"]
    }
    for split, seed in (("train", 42), ("test", 4242)):
        first = pd.read_parquet(data_dir / f"{split}.parquet").iloc[0]
        assert first["extra_info"]["seed"] == seed
        truth = first["reward_model"]["ground_truth"]
        assert truth["grid_text"].split("\n") == fixtures[seed]["grid_rows"]
        assert truth["max_steps"] == fixtures[seed]["max_steps"] and list(truth["start"]) == fixtures[seed]["start"]


def test_preprocess_is_deterministic(data_dir, tmp_path):
    again = tmp_path / "again"
    assert (
        vpo_main(
            [
                "preprocess",
                "--task",
                "maze",
                "--out",
                str(again),
                "--train-size",
                "40",
                "--test-size",
                "8",
                "--set",
                'score_mode="linear"',
            ]
        )
        == 0
    )
    for name in ("train.parquet", "test.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(data_dir / name), pd.read_parquet(again / name))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "train_sise=3"], "unknown setting"),
        (["--set", "score_mode=quadratic"], "score_mode"),
        (["--train-size", "0"], "at least 1"),
        (["--set", "oops"], "KEY=VALUE"),
        # json reads NaN and Infinity as numbers: once a NaN size reached the task
        (["--set", "train_size=NaN"], "--set train_size=NaN: NaN is not a finite number"),
        (["--set", "deep.value=[1, -Infinity]"], "--set deep.value=[1, -Infinity]: [1, -Infinity] is not a finite"),
    ],
)
def test_bad_settings_fail_before_any_file_is_written(tmp_path, argv, message, capsys):
    out = tmp_path / "never"
    with pytest.raises(SystemExit) as err:
        vpo_main(["preprocess", "--task", "maze", "--out", str(out), *argv])
    assert message in str(err.value.code)
    assert not out.exists()


def test_unknown_task_names_the_known_ones(tmp_path):
    with pytest.raises(SystemExit, match="known tasks: .*maze"):
        vpo_main(["preprocess", "--task", "mazes", "--out", str(tmp_path / "x")])


def test_sizes_come_from_the_config_preset(tmp_path):
    out = tmp_path / "ci"
    assert (
        vpo_main(
            [
                "preprocess",
                "--task",
                "maze",
                "--out",
                str(out),
                "--config",
                str(REPO / "config.yaml"),
                "--preset",
                "ci",
                "--test-size",
                "3",
            ]
        )
        == 0
    )
    import yaml

    ci = yaml.safe_load((REPO / "config.yaml").read_text())["presets"]["ci"]["task_settings"]["maze"]["data"]
    assert len(pd.read_parquet(out / "train.parquet")) == ci["train_size"]
    assert len(pd.read_parquet(out / "test.parquet")) == 3  # a flag beats the config


# ---- veRL 0.9.1 RLHFDataset ----------------------------------------------------------------
def word_tokenizer(texts):
    """A word-level tokenizer over the given texts with a chat template, built without downloads."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<|user|>", "<|assistant|>", "<|end|>"]
    words = sorted({w for t in texts for w in pre_tokenizers.Whitespace().pre_tokenize_str(t) for w in [w[0]]})
    vocab = {w: i for i, w in enumerate(specials + [w for w in words if w not in specials])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.add_special_tokens(specials)  # matched whole, before the whitespace split
    template = (
        "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", pad_token="<pad>", eos_token="<|end|>", chat_template=template
    )


@pytest.mark.slow
def test_parquet_loads_with_verl_rlhf_dataset(data_dir, tmp_path):
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    path = str(data_dir / "train.parquet")
    frame = pd.read_parquet(path)
    tokenizer = word_tokenizer([m["content"] for p in frame["prompt"] for m in p])
    texts = [
        tokenizer.apply_chat_template(list(p), add_generation_prompt=True, tokenize=False) for p in frame["prompt"]
    ]
    assert texts[0].startswith("<|user|> Navigate") and texts[0].endswith("<|end|> <|assistant|>")
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert tokenizer.unk_token_id not in tokenizer(texts[0], add_special_tokens=False)["input_ids"]

    def dataset(max_prompt_length):
        config = OmegaConf.create(
            {
                "prompt_key": "prompt",
                "max_prompt_length": max_prompt_length,
                "filter_overlong_prompts": True,
                "filter_overlong_prompts_workers": 1,
                "truncation": "error",
                "cache_dir": str(tmp_path / "cache"),
            }
        )
        return RLHFDataset(data_files=[path], tokenizer=tokenizer, config=config)

    full = dataset(max(lengths))
    assert len(full) == len(frame)
    # the length filter really tokenized the chat-templated prompts: one token less drops the longest
    cut = max(lengths) - 1
    assert len(dataset(cut)) == sum(n <= cut for n in lengths) < len(frame)

    item = full[5]
    assert item["raw_prompt"] == list(frame["prompt"][5])
    assert item["index"] == 5 and item["data_source"] == "maze"
    gt = item["reward_model"]["ground_truth"]
    assert set(GT_KEYS) <= set(gt) and gt["max_steps"] == frame["reward_model"][5]["ground_truth"]["max_steps"]
    batch = collate_fn([full[i] for i in range(4)])
    assert len(batch["raw_prompt"]) == 4

    # the row veRL hands over goes through prepare_row and the reward unchanged in meaning
    prepared = prepare_row({k: v for k, v in item.items() if k in frame.columns}, "vpo", 3, seed=0)
    route = shortest_route(prepared["reward_model"]["ground_truth"])
    text = "\n".join(f"<route_{i}>{r}</route_{i}>" for i, r in enumerate([route, "UP", route], 1))
    result = compute_score(
        prepared["data_source"], text, prepared["reward_model"]["ground_truth"], prepared["extra_info"]
    )
    assert json.loads(result["sub_scores"])[0][0] == 1.0 and json.loads(result["sub_scores"])[2] == [0, 0, 0, 0]
