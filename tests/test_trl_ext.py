"""vpo.trl_ext: TRL's GRPOTrainer with the project's estimators. One generation batch of the tiny maze
model goes through the trainer's real `_generate_and_score_completions`; the advantages it hands TRL's
loss are recomputed here from the completions it returns (decoded, rescored, grouped as TRL orders
them), and TRL's own GRPO is compared with the project's on the same rewards."""

from __future__ import annotations

import collections

import hashlib
import json

import numpy as np
import pytest

pytest.importorskip("trl")

N = 3  # completions per prompt (the tiny settings' rollouts_per_prompt)


def synthetic_scorer(completion: str, *, extra_info: dict, **_) -> dict:
    """A scorer of your own: 1 to num_solutions answers (one for single-answer rows) of 4 objectives,
    read from a hash of the text, so that an untrained model's completions still get rewards that differ."""
    digest = hashlib.sha256(completion.encode()).digest()
    m = 1 + digest[0] % extra_info["num_solutions"]
    matrix = [[digest[1 + 4 * i + j] / 255.0 for j in range(4)] for i in range(m)]
    score = float(max(sum(row) for row in matrix))
    # a strategy of three and a verdict, for the methods that read them (poly_epo, grpo_div)
    return {"score": score, "sub_scores": json.dumps(matrix), "strategy": "abc"[digest[0] % 3], "acc": float(score > 2)}


def texts_of(trainer, output) -> list[str]:
    """The completions TRL generated, decoded as its reward functions see them."""
    ids, mask = output["completion_ids"], output["completion_mask"].bool()
    return trainer.processing_class.batch_decode([row[keep] for row, keep in zip(ids, mask)], skip_special_tokens=True)


@pytest.fixture(scope="module")
def one_batch(tiny_maze_data, tiny_multi_base_model, tiny_local_settings, tmp_path_factory):
    """(make_trainer(method, **kwargs), the 2 prompts x N rows of `method` TRL's sampler hands the trainer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vpo.trl_ext.trainer import EstimatorGRPOTrainer, grpo_arguments, task_dataset

    out = tmp_path_factory.mktemp("trl")

    def make(method, trainer_class=EstimatorGRPOTrainer, **kwargs):
        dataset = task_dataset(str(tiny_maze_data), method or "vpo")
        args = grpo_arguments(
            tiny_local_settings, max_new_tokens=24, output_dir=str(out), seed=0, **kwargs.pop("changes", {})
        )
        model = AutoModelForCausalLM.from_pretrained(tiny_multi_base_model)
        tokenizer = AutoTokenizer.from_pretrained(tiny_multi_base_model)
        if method is not None:
            kwargs["method"] = method
        return trainer_class(model, args=args, train_dataset=dataset, processing_class=tokenizer, **kwargs)

    return make


def rows_of(trainer) -> list[dict]:
    """The first 2 prompts' rows, each N times in a row, as TRL's sampler hands them to the trainer."""
    return [trainer.train_dataset[i] for i in range(2) for _ in range(N)]


def test_an_unsupported_trl_release_stops_with_one_line(monkeypatch):
    import trl

    from vpo.trl_ext import require_supported_trl

    monkeypatch.setattr(trl, "__version__", "1.15.2")
    with pytest.raises(RuntimeError) as err:
        require_supported_trl()
    assert "1.15.2" in str(err.value) and "1.16" in str(err.value) and "\n" not in str(err.value)


def test_trls_own_scaling_and_reward_functions_are_refused(one_batch):
    make = one_batch
    with pytest.raises(ValueError, match="scale_rewards='none'"):
        make("vpo", changes={"scale_rewards": "group"})
    with pytest.raises(TypeError, match="reward_funcs"):
        make("vpo", reward_funcs=[lambda **_: [0.0]])


EVERY_METHOD = [
    "vpo", "grpo", "max_at_k", "vpo_single", "maxrl", "multi_rlvr", "gdpo", "goal_cond", "random_weight", "poly_epo",
    "grpo_div",
]  # fmt: skip


@pytest.mark.parametrize("method", EVERY_METHOD)
def test_the_advantages_are_the_estimators_of_the_rescored_completions_in_trls_groups(one_batch, method):
    """VPO, GRPO and Max@k as the issue asks, and every other method of the table (the same call, its own input)."""
    from vpo.method_advantage import advantage_for_method
    from vpo.rollouts import as_matrix

    settings = {"set_size": 2} if method == "poly_epo" else {}  # sets smaller than the groups of N = 3
    trainer = one_batch(method, scorer=synthetic_scorer, estimator_seed=7, method_settings=settings)
    batch = rows_of(trainer)
    output = trainer._generate_and_score_completions(batch)
    results = [synthetic_scorer(text, **row) for text, row in zip(texts_of(trainer, output), batch)]
    scores = np.array([r["score"] for r in results])
    groups = np.repeat(np.arange(len(batch) // N), N)
    assert len(set(scores.round(6))) > 2, "the completions must score differently for the comparison to mean anything"
    if method == "grpo":  # written out: (r - group mean) / (unbiased group std + 1e-6)
        by_group = scores.reshape(-1, N)
        expected = (
            (by_group - by_group.mean(1, keepdims=True)) / (by_group.std(1, ddof=1, keepdims=True) + 1e-6)
        ).ravel()
    else:  # the same estimator with the same seeded generator: the same Dirichlet weights
        expected, _ = advantage_for_method(
            method,
            scores=scores,
            sub_scores=[as_matrix(r["sub_scores"]) for r in results],
            group_ids=groups,
            settings=settings,
            rng=np.random.default_rng([7, 1]),
            response_lengths=output["completion_mask"].sum(1).numpy(),  # gdpo's
            strategy_keys=[r["strategy"] for r in results],  # poly_epo's and grpo_div's
            correct=[r["acc"] > 0 for r in results],
        )
    np.testing.assert_allclose(output["advantages"].numpy(), expected, rtol=1e-6, atol=1e-6)
    assert np.abs(expected).max() > 1e-3  # a comparison of advantages that move
    # the completions table (W&B's) shows the advantages the loss uses, not TRL's own
    np.testing.assert_allclose(list(trainer._logs["advantages"]), expected, rtol=1e-6, atol=1e-6)
    logged = trainer._metrics["eval"]  # outside train() the model is in eval mode
    assert logged["advantage/std"] and logged["pool_diversity"]
    if method == "vpo":
        assert logged["vpo/rows_per_rollout_mean"][-1] == pytest.approx(
            np.mean([len(as_matrix(r["sub_scores"])) for r in results])
        )


def test_a_served_judges_keys_are_what_poly_epo_trains_on(one_batch):
    """`judge:` in poly_epo's settings: one call per TRL group with the completions it scored, the judge's
    keys (the stand-in judge of tests/test_strategy_judge.py: equal last lines, one strategy) in the estimate."""
    import threading
    from http.server import ThreadingHTTPServer

    from test_strategy_judge import LastLineJudge, last_line_labels

    from vpo.method_advantage import advantage_for_method

    LastLineJudge.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), LastLineJudge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    judge = {"url": f"http://127.0.0.1:{server.server_address[1]}/v1", "model": "j"}
    try:
        trainer = one_batch("poly_epo", scorer=synthetic_scorer, method_settings={"set_size": 2, "judge": judge})
        batch = rows_of(trainer)
        output = trainer._generate_and_score_completions(batch)
    finally:
        server.shutdown()
        server.server_close()
    assert len(LastLineJudge.requests) == len(batch) // N
    results = [synthetic_scorer(text, **row) for text, row in zip(texts_of(trainer, output), batch)]
    # the calls run concurrently: each group's labels found by its problem's text
    by_problem = {
        body["messages"][-1]["content"].split("\n\nResponses:")[0]: body for _, body in LastLineJudge.requests
    }
    problems = [question for question, _ in trainer.matrix_reward.texts[::N]]
    assert len(by_problem) == len(problems) == len(batch) // N
    labels = [label for problem in problems for label in last_line_labels(by_problem[f"Problem:\n{problem}"])]
    keys = [
        "degenerate" if r["strategy"] == "degenerate" or label == 0 else f"judge:{label}"
        for r, label in zip(results, labels)
    ]
    expected, _ = advantage_for_method(
        "poly_epo", scores=np.array([r["score"] for r in results]), sub_scores=None,
        group_ids=np.repeat(np.arange(len(batch) // N), N), settings={"set_size": 2}, strategy_keys=keys,
        correct=[r["acc"] > 0 for r in results],
    )  # fmt: skip
    np.testing.assert_allclose(output["advantages"].numpy(), expected, rtol=1e-6, atol=1e-6)
    assert trainer.last_batch["strategies"] == keys and trainer._metrics["eval"]["judge/failed_groups"] == [0.0]


def test_the_completions_table_shows_the_estimators_advantages_where_trls_differ(one_batch):
    """VPO's advantages are not TRL's group z-scores of the summed scalar (differences up to about 1.3 were
    logged before): the table holds the estimator's, and TRL's private stores this reads are where TRL
    1.16 keeps them (a TRL whose internals moved fails here, not silently)."""
    trainer = one_batch("vpo", scorer=synthetic_scorer, estimator_seed=7)
    assert isinstance(trainer._logs["advantages"], collections.deque) and set(trainer._metrics) == {"train", "eval"}
    batch = rows_of(trainer)
    output = trainer._generate_and_score_completions(batch)
    scores = np.array([r["score"] for r in trainer.matrix_reward.results]).reshape(-1, N)
    trls = ((scores - scores.mean(1, keepdims=True)) / (scores.std(1, ddof=1, keepdims=True) + 1e-4)).ravel()
    ours = output["advantages"].numpy()
    assert np.abs(ours - trls).max() > 0.05
    np.testing.assert_allclose(list(trainer._logs["advantages"]), ours, rtol=1e-6, atol=1e-6)
    del trainer._logs["advantages"]  # as if TRL kept them elsewhere
    with pytest.raises(RuntimeError, match="internals moved"):
        trainer._log_advantages(ours)


def test_the_portable_route_is_vpos_advantage_up_to_a_constant_and_trls_epsilon(one_batch):
    """Plain TRL (its own GRPOTrainer, scale_rewards="group") with `VPOScore` as its reward function: its
    advantages are sqrt((N - 1) / N) x the project's VPO advantages of the same completions and weights,
    but for the epsilons under the standard deviations (TRL 1e-4, the project 1e-6)."""
    from trl import GRPOTrainer

    from vpo.advantage import vpo_advantage
    from vpo.trl_ext.portable import VPOScore

    reward = VPOScore(synthetic_scorer, n_weights=50, seed=3)
    trainer = one_batch(None, trainer_class=GRPOTrainer, reward_funcs=[reward], changes={"scale_rewards": "group"})
    output = trainer._generate_and_score_completions(rows_of(trainer))
    keys, matrices, weights = reward.last["keys"], reward.last["matrices"], reward.last["weights"]
    assert len(set(keys)) == 2 and all(w.shape == (50, 4) for w in weights.values())
    ours, _ = vpo_advantage(matrices, keys, weights=weights)
    trls = output["advantages"].numpy()
    assert np.abs(ours).max() > 0.5  # advantages that move
    np.testing.assert_allclose(trls, np.sqrt((N - 1) / N) * ours, atol=2e-3)
    # written out: TRL's scaling of the reward function's scores, the epsilon and the unbiased std its own
    scores = np.asarray(reward.last["scores"]).reshape(-1, N)
    by_hand = (scores - scores.mean(1, keepdims=True)) / (scores.std(1, ddof=1, keepdims=True) + 1e-4)
    np.testing.assert_allclose(trls, by_hand.ravel(), rtol=1e-5, atol=1e-6)
    # the group's weights depend on the prompt, the step and the seed, not on the order of the call
    again = VPOScore(synthetic_scorer, n_weights=50, seed=3)
    assert np.array_equal(again.group_weights(keys[0], 4, 0), weights[keys[0]])


def test_trls_own_grpo_is_the_projects_grpo_but_for_its_epsilon(one_batch):
    """TRL: (r - mean) / (unbiased std + 1e-4); the project (veRL's): the same with 1e-6."""
    from trl import GRPOTrainer

    from vpo.advantage import grpo_advantage

    def scalar(completions, **columns):
        return [
            synthetic_scorer(c[-1]["content"], extra_info=info)["score"]
            for c, info in zip(completions, columns["extra_info"])
        ]

    trainer = one_batch(None, trainer_class=GRPOTrainer, reward_funcs=[scalar], changes={"scale_rewards": "group"})
    batch = rows_of(trainer)
    output = trainer._generate_and_score_completions(batch)
    scores = np.array([synthetic_scorer(text, **row)["score"] for text, row in zip(texts_of(trainer, output), batch)])
    std = np.repeat(scores.reshape(-1, N).std(1, ddof=1), N)
    ours = grpo_advantage(scores, np.repeat(np.arange(len(batch) // N), N))
    np.testing.assert_allclose(output["advantages"].numpy(), ours * (std + 1e-6) / (std + 1e-4), rtol=1e-5, atol=1e-6)


def test_two_rl_steps_train_and_log_the_estimators_diagnostics(one_batch):
    trainer = one_batch("vpo", scorer=synthetic_scorer, changes={"max_steps": 4})  # 2 RL steps x 2 mini-batches
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 4
    assert any(not np.allclose(a.numpy(), b.detach().numpy()) for a, b in zip(before, trainer.model.parameters()))
    steps = [row for row in trainer.state.log_history if "loss" in row]
    assert len(steps) == 4 and all("kl" in row for row in steps)
    # TRL logs a generation batch's metrics with its first optimizer step: one row per RL step
    generated = [row for row in steps if "pool_diversity" in row]
    assert len(generated) == 2 and all("vpo/rows_per_rollout_mean" in row for row in generated)


def test_the_recipe_in_docs_trl_md_runs_as_written(tiny_multi_base_model, tmp_path, monkeypatch):
    """docs/trl.md's code block, with the tiny maze model and 2 RL steps: it trains, and the VPO
    diagnostics reach TRL's log."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "trl.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/trl.md: one python block, the recipe"
    code = re.sub(r"^MODEL = .*$", f"MODEL = {str(tiny_multi_base_model)!r}", blocks[0], count=1, flags=re.M)
    code = re.sub(r"^STEPS = .*$", "STEPS = 2", code, count=1, flags=re.M)
    assert code.count("MODEL = ") == 1 and "STEPS = 2\n" in code and code != blocks[0]
    monkeypatch.chdir(tmp_path)  # the recipe writes to ./vpo-trl
    scope: dict = {}
    exec(compile(code, "docs/trl.md", "exec"), scope)
    trainer = scope["trainer"]
    assert trainer.state.global_step == 4
    logged = [row for row in trainer.state.log_history if "pool_diversity" in row]
    assert len(logged) == 2 and all("vpo/pool_expected_best_mean" in row for row in logged)
    # the scorer of the recipe on hand-made completions: 2 answers, one correct and balanced
    assert scope["score"]("<answer_1>3 + 4</answer_1><answer_2>2 + 2</answer_2>", target=7) == {
        "score": pytest.approx(1 + 6 / 7),
        "sub_scores": json.dumps([[1.0, 1 - 1 / 7], [0.0, 0.0]]),
    }
    assert json.loads(scope["score"]("no tags at all", target=7)["sub_scores"]) == [[0.0, 0.0]]


def test_the_recipes_settings_learn_on_a_task_the_tiny_model_scores(
    tiny_maze_data, tiny_multi_base_model, tmp_path, monkeypatch
):
    """The recipe's toy task gives the tiny maze model no reward (it writes routes, not sums), so its run
    above proves steps, not learning. Its settings (`args`) on a task the tiny model scores on: each answer
    slot of the maze rows' m = 3 prompts scored by the share of its words that are moves and by whether it
    is written at all (k = 2). Rewards differ within groups, the advantages move, the loss and gradient are
    not 0, and the update changes the model."""

    def moves(completion: str, **_) -> dict:
        slots = re.findall(r"<route_\d+>(.*?)</route_\d+>", completion, re.S) or [completion]
        rows = [
            [
                sum(w in ("UP", "DOWN", "LEFT", "RIGHT") for w in s.split()) / max(len(s.split()), 1),
                float(bool(s.strip())),
            ]
            for s in slots[:3]
        ]
        return {"score": max(sum(r) for r in rows), "sub_scores": json.dumps(rows)}

    import re
    from pathlib import Path

    import torch

    from vpo.trl_ext.trainer import EstimatorGRPOTrainer, task_dataset

    block = re.findall(
        r"```python\n(.*?)```", (Path(__file__).resolve().parents[1] / "docs" / "trl.md").read_text(), re.S
    )[0]
    code = re.sub(r"^MODEL = .*$", f"MODEL = {str(tiny_multi_base_model)!r}", block, count=1, flags=re.M)
    code = re.sub(r"^STEPS = .*$", "STEPS = 2", code, count=1, flags=re.M).replace("trainer.train()", "")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "docs/trl.md", "exec"), scope)
    trainer = EstimatorGRPOTrainer(
        scope["MODEL"], method="vpo", args=scope["args"], train_dataset=task_dataset(str(tiny_maze_data), "vpo"),
        scorer=moves, method_settings={"alpha": 1.0, "n_weights": 100},
    )  # fmt: skip
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    generated = [row for row in trainer.state.log_history if "pool_diversity" in row]
    assert len(generated) == 2 and trainer.state.global_step == 4
    assert max(row["rewards/vpo_score/mean"] for row in generated) > 0
    assert max(row["rewards/vpo_score/std"] for row in generated) > 0  # rewards that differ: advantages that move
    assert max(row["advantage/std"] for row in generated) > 0.5
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters()))
    assert max(abs(row.get("grad_norm", 0.0)) for row in trainer.state.log_history) > 0
    assert max(abs(row.get("loss", 0.0)) for row in trainer.state.log_history) > 0


def trl_train_args(cfg, data, base, out, method="vpo"):
    return [
        "train",
        "--backend",
        "trl",
        "--task",
        "maze",
        "--method",
        method,
        "--seed",
        "0",
        "--preset",
        "ci",
        "--config",
        str(cfg),
        "--data",
        str(data),
        "--base-model",
        str(base),
        "--out",
        str(out),
    ]


def test_a_killed_trl_cell_resumes_to_the_run_an_uninterrupted_one_writes(
    tiny_maze_data, tiny_multi_base_model, tmp_path
):
    """`vpo train --backend trl` (the workflow's trl backend) killed after its first checkpoint resumes
    from it; its metrics.jsonl (the local trainer's keys but ppo_kl, one record per RL step) and final
    model equal an uninterrupted run's; merge copies the model; a checkpoint of other settings is not resumed."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import yaml
    from safetensors.numpy import load_file

    from conftest import TINY_LOCAL_TRAINER
    from vpo.cli import main

    repo = Path(__file__).resolve().parents[1]
    raw = yaml.safe_load((repo / "config.yaml").read_text())
    raw["presets"]["ci"]["local_trainer"] = {**TINY_LOCAL_TRAINER, "steps": 6, "checkpoint_every": 2}
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))

    killed, fresh = tmp_path / "killed", tmp_path / "fresh"
    proc = subprocess.Popen(
        [sys.executable, "-m", "vpo.cli", *trl_train_args(cfg, tiny_maze_data, tiny_multi_base_model, killed)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while not list((killed / "checkpoints").glob("checkpoint-*/record.json")) and proc.poll() is None:
        assert time.time() < deadline, "no checkpoint within 5 minutes"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "train.json").exists(), "the run finished before it could be killed"

    assert main(trl_train_args(cfg, tiny_maze_data, tiny_multi_base_model, killed)) == 0
    info = json.loads((killed / "train.json").read_text())
    assert info["backend"] == "trl" and 2 <= info["resumed_from_step"] < 6
    assert main(trl_train_args(cfg, tiny_maze_data, tiny_multi_base_model, fresh)) == 0

    def metrics(run):
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in row.items() if k not in ("generation_s", "step_s", "wall_time_s")} for row in rows]

    resumed = metrics(killed)
    assert [row["step"] for row in resumed] == [1, 2, 3, 4, 5, 6]
    local_keys = {
        "score_mean",
        "score_max",
        "reward/completion",
        "acc",
        "pool_diversity",
        "advantage/max",
        "advantage/zero_frac",
        "vpo/advantage_draw_std",
        "parse_failure_rate",
        "response_length_mean",
        "truncated_share",
        "pg_loss",
        "kl",
        "entropy",
        "clipfrac",
        "grad_norm",
    }
    assert local_keys <= set(resumed[0])
    assert resumed == metrics(fresh)
    final = [load_file(run / "checkpoints" / "final" / "model.safetensors") for run in (killed, fresh)]
    assert all(np.array_equal(final[0][name], final[1][name]) for name in final[0])

    assert main(["merge", "--run", str(killed)]) == 0
    from vpo.generate import load_pretrained

    load_pretrained(killed / "model")

    raw["presets"]["ci"]["local_trainer"]["lr"] = 1e-3  # other settings: the old checkpoints are set aside
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    (killed / "train.json").unlink()
    assert main(trl_train_args(cfg, tiny_maze_data, tiny_multi_base_model, killed)) == 0
    assert json.loads((killed / "train.json").read_text())["resumed_from_step"] == 0


def tiny_trl_config(tmp_path, **changes):
    """A config.yaml whose ci preset trains the tiny model (4 RL steps, checkpoints every 2) with `changes`."""
    from pathlib import Path

    import yaml

    from conftest import TINY_LOCAL_TRAINER

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())
    raw["presets"]["ci"]["local_trainer"] = {**TINY_LOCAL_TRAINER, **changes}
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    return cfg


def run_files(run):
    """(metrics.jsonl rows without their timings, the final model's tensors) of a TRL run directory."""
    from safetensors.numpy import load_file

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    timings = ("generation_s", "step_s", "wall_time_s")
    return [{k: v for k, v in row.items() if k not in timings} for row in rows], load_file(
        run / "checkpoints" / "final" / "model.safetensors"
    )


def same_run(a, b):
    (rows_a, model_a), (rows_b, model_b) = a, b
    return (
        rows_a == rows_b
        and model_a.keys() == model_b.keys()
        and all(np.array_equal(model_a[n], model_b[n]) for n in model_a)
    )


@pytest.mark.slow
def test_a_forced_trl_retrain_retrains_and_a_damaged_checkpoint_gives_way_to_the_one_before(
    tiny_maze_data, tiny_multi_base_model, tmp_path, caplog
):
    """A finished trl cell trained again (Snakemake's -f) once resumed from its last checkpoint and TRL trained
    one optimizer step past max_steps each time (metrics.jsonl reached step 5 of 4). It must retrain from step 0
    to the same run; a run cut off after its last checkpoint finishes without training; a damaged newest
    checkpoint is named and the one before it resumed."""
    import shutil

    from vpo.cli import main

    cfg = tiny_trl_config(tmp_path, steps=4, checkpoint_every=2)
    cell, fresh = tmp_path / "cell", tmp_path / "fresh"
    assert main(trl_train_args(cfg, tiny_maze_data, tiny_multi_base_model, fresh)) == 0
    expected = run_files(fresh)
    assert [row["step"] for row in expected[0]] == [1, 2, 3, 4]

    assert main(trl_train_args(cfg, tiny_maze_data, tiny_multi_base_model, cell)) == 0
    assert main(trl_train_args(cfg, tiny_maze_data, tiny_multi_base_model, cell)) == 0  # forced: the cell again
    info = json.loads((cell / "train.json").read_text())
    assert info["resumed_from_step"] == 0 and info["steps"] == 4
    assert same_run(run_files(cell), expected)
    assert len(list(cell.glob("checkpoints.stale-*"))) == 1  # the finished run's checkpoints, set aside

    # killed after its last checkpoint (checkpoint-8: 4 RL steps x 2 optimizer steps), before final/
    shutil.rmtree(cell / "checkpoints" / "final")
    assert main(trl_train_args(cfg, tiny_maze_data, tiny_multi_base_model, cell)) == 0
    assert json.loads((cell / "train.json").read_text())["resumed_from_step"] == 4
    assert same_run(run_files(cell), expected)

    # the newest checkpoint's weights cut short: named, set aside, and the run resumes from step 2
    shutil.rmtree(cell / "checkpoints" / "final")
    weights = cell / "checkpoints" / "checkpoint-8" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    caplog.clear()
    assert main(trl_train_args(cfg, tiny_maze_data, tiny_multi_base_model, cell)) == 0
    assert f"checkpoint {weights.parent} cannot be resumed ({weights}:" in caplog.text
    assert json.loads((cell / "train.json").read_text())["resumed_from_step"] == 2
    assert (cell / "checkpoints" / "damaged-checkpoint-8").is_dir()
    assert same_run(run_files(cell), expected)


def test_a_backend_that_is_not_installed_stops_before_the_cell_is_touched(
    tiny_maze_data, tiny_multi_base_model, tmp_path, monkeypatch
):
    """`--config backend=trl` without TRL once truncated a finished cell's metrics.jsonl and removed its
    train.json before the missing-TRL error."""
    import sys

    from vpo.cli import main

    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "train.json").write_text('{"backend": "local"}')
    (cell / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    monkeypatch.setitem(sys.modules, "trl", None)  # what `import trl` finds when TRL is not installed
    with pytest.raises(SystemExit, match=r"vpo train: backend trl needs the package trl, which this Python lacks"):
        main(trl_train_args(tiny_trl_config(tmp_path), tiny_maze_data, tiny_multi_base_model, cell))
    assert (cell / "train.json").read_text() == '{"backend": "local"}'
    assert (cell / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
