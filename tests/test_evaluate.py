"""`vpo eval`: the candidate parquet and a JSON whose metrics are recomputed here by brute force."""

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
BUDGET = 6
# different limits for single- and multi-answer methods, so each run shows which one reached the backend
LIMITS = {"single": 12, "multi": 40}
EVAL = {
    "budget": BUDGET,
    "temperature": 1.0,
    "top_p": 1.0,
    "max_new_tokens": LIMITS,
    "goal_weights": "none",
    "seeds": [0],
    "gpus": 0,
}
OBJECTIVES = ["completion", "gold", "diamond", "avoid_lava"]


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw["presets"]["ci"].setdefault("task_settings", {}).setdefault("maze", {})["eval"] = dict(EVAL)
    path = tmp_path_factory.mktemp("cfg") / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture(scope="module", params=["vpo", "grpo"])
def evaluated(request, tiny_config, tiny_base_model, tiny_maze_data, tmp_path_factory):
    """Run `vpo eval` on the tiny base model copied into a `.../seed7/model` run layout."""
    import shutil

    from vpo.cli import main

    run = tmp_path_factory.mktemp("run") / "maze" / request.param / "seed7"
    shutil.copytree(tiny_base_model, run / "model")
    out = run / "eval" / "evalseed0.parquet"
    assert (
        main(
            [
                "eval",
                "--model",
                str(run / "model"),
                "--task",
                "maze",
                "--method",
                request.param,
                "--data",
                str(tiny_maze_data),
                "--seed",
                "0",
                "--preset",
                "ci",
                "--config",
                str(tiny_config),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return request.param, pd.read_parquet(out), json.loads(out.with_suffix(".json").read_text())


def test_json_header_and_candidate_layout(evaluated, tiny_maze_data):
    method, frame, info = evaluated
    m = 3 if method == "vpo" else 1
    assert (info["task"], info["method"], info["train_seed"], info["eval_seed"]) == ("maze", method, 7, 0)
    assert info["budget"] == BUDGET and info["n_problems"] == 3
    # the ci preset samples with the torch backend, and the tiny base model with the plain-torch sampler
    assert info["backend"] == "torch"
    assert info["engine"] == info["provenance"]["engine"] == "vpo.llama_sampler"
    assert {"problem", "prompt", "chain", "slot", "text", "scalar", *OBJECTIVES} <= set(frame.columns)
    assert len(frame) == 3 * BUDGET
    for _, pool in frame.groupby("problem"):
        assert sorted(pool["chain"].unique()) == list(range(BUDGET // m))
        assert sorted(pool["slot"].unique()) == list(range(m))
    if method == "vpo":
        assert frame["prompt"].str.contains("<route_3>").all()
    else:
        assert not frame["prompt"].str.contains("<route_1>").any()


def moves_of(text):
    """Moves of one answer, read independently of the task code: the text between the first <answer> and
    the next </answer> (any case), else the whole text; whole words UP/DOWN/LEFT/RIGHT."""
    low = text.lower()
    start = low.find("<answer>")
    end = low.find("</answer>", start + 8) if start >= 0 else -1
    body = text[start + 8 : end] if end >= 0 else text
    return re.findall(r"\b(UP|DOWN|LEFT|RIGHT)\b", body.upper())


def test_candidate_scores_match_an_independent_rescoring(evaluated, tiny_maze_data):
    from vpo.data import read_rows
    from vpo_tasks.maze import parse_grid, simulate

    method, frame, _ = evaluated
    truth = {r["extra_info"]["index"]: r["reward_model"]["ground_truth"] for r in read_rows(tiny_maze_data, "test")}
    for _, cand in frame.iterrows():
        gt = truth[cand["problem"]]
        if method == "grpo":  # a single-answer chain is scored on its whole response
            assert cand["text"] == cand["response"]
        moves = moves_of(cand["text"])
        assert cand["answer"] == " ".join(moves) and cand["parsed"] == bool(moves)
        if not moves:
            assert all(cand[o] == 0.0 for o in OBJECTIVES)
            continue
        sim = simulate(parse_grid(gt["grid_text"]), tuple(gt["start"]), tuple(gt["end"]), gt["max_steps"], moves)
        assert (cand["completion"] == 1.0) == bool(sim["reached"])
        # the scalar is the mean of the four channels (the maze GRPO scalar)
    assert np.allclose(frame["scalar"], frame[OBJECTIVES].mean(axis=1))


def test_each_method_gets_its_own_token_limit(evaluated, tiny_base_model):
    """The torch backend stops single-answer responses at eval.max_new_tokens.single and
    multi-answer ones at .multi (each response: its tokens plus the end-of-sequence token it stopped on)."""
    from transformers import AutoTokenizer

    method, frame, info = evaluated
    limit = LIMITS["multi" if method == "vpo" else "single"]
    assert info["sampling"]["max_new_tokens"] == limit
    tokenizer = AutoTokenizer.from_pretrained(tiny_base_model)
    lengths = [len(tokenizer(r, add_special_tokens=False)["input_ids"]) for r in frame["response"].unique()]
    assert max(lengths) == limit  # the limit binds: some responses were cut there


def brute_pass_at_k(correct, k):
    subsets = list(itertools.combinations(range(len(correct)), k))
    return np.mean([any(correct[i] for i in s) for s in subsets])


def brute_best_at_k(scalars, k):
    return np.mean([max(scalars[i] for i in s) for s in itertools.combinations(range(len(scalars)), k)])


def test_json_metrics_recomputed_from_the_parquet(evaluated):
    from vpo.weights import sample_weights

    method, frame, info = evaluated
    pools = [pool.sort_values(["chain", "slot"]) for _, pool in frame.groupby("problem")]
    for k in range(1, BUDGET + 1):
        assert info["pass_at_k"][k - 1] == pytest.approx(
            np.mean([brute_pass_at_k(p["completion"].to_numpy() >= 1.0, k) for p in pools]), abs=1e-9
        )
        assert info["best_at_k"][k - 1] == pytest.approx(
            np.mean([brute_best_at_k(p["scalar"].to_numpy(), k) for p in pools]), abs=1e-9
        )
    # the permutation curve is a running max: it ends at the pool maximum and never decreases
    assert info["best_at_k_perm"][-1] == pytest.approx(np.mean([p["scalar"].max() for p in pools]))
    assert np.all(np.diff(info["best_at_k_perm"]) >= -1e-12)
    pair_l1 = []
    for p in pools:
        v = p[OBJECTIVES].to_numpy()
        pair_l1.append(np.mean([np.abs(v[i] - v[j]).sum() for i, j in itertools.combinations(range(len(v)), 2)]))
    assert info["diversity"] == pytest.approx(np.mean(pair_l1), abs=1e-9)
    weights = sample_weights(4, 100, alpha=1.0, sampler="naive", rng=np.random.default_rng(0))
    # E_w[best-of-m] per chain: for each weight, the best of the chain's m answers; mean over weights and chains
    per_chain = [
        np.mean((c[OBJECTIVES].to_numpy() @ weights.T).max(axis=0)) for p in pools for _, c in p.groupby("chain")
    ]
    assert info["expected_best_of_m"] == pytest.approx(np.mean(per_chain), abs=1e-9)
    failed = [not bool(c["answer"].str.len().gt(0).any()) for p in pools for _, c in p.groupby("chain")]
    assert info["parse_failure_rate"] == pytest.approx(np.mean(failed))
    for o in OBJECTIVES:
        assert info["objective_means"][o] == pytest.approx(frame[o].mean())


def test_budget_must_be_a_multiple_of_m_and_model_must_exist(tiny_base_model, tiny_maze_data, tmp_path):
    from vpo.evaluate import evaluate

    with pytest.raises(ValueError, match="multiple of m=3"):
        evaluate(
            str(tiny_base_model),
            "maze",
            "vpo",
            str(tiny_maze_data),
            0,
            str(tmp_path / "e.parquet"),
            eval_settings={**EVAL, "budget": 7},
            m=3,
            train_seed=0,
        )
    with pytest.raises(FileNotFoundError, match="vpo merge"):
        evaluate(
            str(tmp_path / "missing"),
            "maze",
            "grpo",
            str(tiny_maze_data),
            0,
            str(tmp_path / "e.parquet"),
            eval_settings=EVAL,
            m=3,
            train_seed=0,
        )
    assert not (tmp_path / "e.parquet").exists()


@pytest.fixture
def recorded(monkeypatch):
    """vLLM cannot run on this machine: a stand-in takes the place of the backend and records what
    evaluation hands it (`vllm_sampling_kwargs` is what VLLMBackend turns that into for vLLM)."""
    import vpo.evaluate as evaluate

    seen = {}

    class Recorder:
        engine = "recorder"

        def generate(self, prompts, n, sampling):
            seen.update(n=n, sampling=sampling)
            return [["<answer>RIGHT DOWN</answer>"] * n for _ in prompts]

    def make_backend(name, model_path, **kwargs):
        seen.update(name=name, kwargs=kwargs)
        return Recorder()

    monkeypatch.setattr(evaluate, "make_backend", make_backend)  # the name evaluation calls
    return seen


@pytest.fixture
def fake_model(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return model


@pytest.mark.parametrize(
    "method, limit", [("grpo", LIMITS["single"]), ("goal_cond", LIMITS["single"]), ("vpo", LIMITS["multi"])]
)
def test_token_limits_reach_the_vllm_backend(method, limit, recorded, fake_model, tiny_maze_data, tmp_path):
    from vpo.evaluate import evaluate
    from vpo.generate import vllm_sampling_kwargs

    seen, model = recorded, fake_model
    payload = evaluate(
        str(model),
        "maze",
        method,
        str(tiny_maze_data),
        3,
        str(tmp_path / "e.parquet"),
        eval_settings=EVAL,
        m=3,
        train_seed=0,
        backend="vllm",
    )
    assert seen["name"] == "vllm" and seen["kwargs"] == {"seed": 3}
    assert seen["n"] == (BUDGET // 3 if method == "vpo" else BUDGET)
    kwargs = vllm_sampling_kwargs(seen["sampling"], seen["n"])
    assert kwargs["max_tokens"] == limit and kwargs["seed"] == 3
    assert payload["sampling"]["max_new_tokens"] == limit and payload["backend"] == "vllm"


def test_goal_weights_per_chain_in_the_candidate_frame(recorded, fake_model, tiny_maze_data, tmp_path):
    from vpo.evaluate import evaluate
    from vpo.prompts import GOAL_HEADER

    payload = evaluate(
        str(fake_model),
        "maze",
        "goal_cond",
        str(tiny_maze_data),
        0,
        str(tmp_path / "e.parquet"),
        eval_settings={**EVAL, "goal_weights": "per_chain"},
        m=3,
        train_seed=0,
        backend="vllm",
    )
    frame = pd.read_parquet(tmp_path / "e.parquet")
    assert payload["goal_weights"] == "per_chain" and recorded["n"] == 3  # each vector sampled m times
    for _, pool in frame.groupby("problem"):
        shown = [tuple(w) for w in pool.sort_values("chain")["weights"]]
        assert len(shown) == BUDGET and shown[:3] == [shown[0]] * 3 and shown[3:] == [shown[3]] * 3
        assert shown[0] != shown[3] and pool["prompt"].str.contains(GOAL_HEADER, regex=False).all()
        assert sorted(pool["chain"]) == list(range(BUDGET)) and set(pool["slot"]) == {0}


def test_the_evaluation_records_its_provenance_and_its_cells_training(recorded, fake_model, tiny_maze_data, tmp_path):
    """The JSON carries what made the evaluation and, from the train.json beside the model, what made the model."""
    from vpo.evaluate import evaluate
    from vpo.provenance import collect

    (fake_model.parent / "train.json").write_text(json.dumps({"backend": "local", "provenance": {"commit": "c" * 40}}))
    payload = evaluate(
        str(fake_model),
        "maze",
        "grpo",
        str(tiny_maze_data),
        0,
        str(tmp_path / "e.parquet"),
        eval_settings=EVAL,
        m=1,
        train_seed=0,
        backend="vllm",
    )
    assert payload["training_provenance"] == {"commit": "c" * 40}
    assert payload["provenance"]["commit"] == collect()["commit"]
    assert json.loads((tmp_path / "e.json").read_text())["provenance"]["packages"] == collect()["packages"]
