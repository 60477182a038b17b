"""vLLM's CPU build behind `vpo eval --backend vllm`, on the tiny CPU model (heads of 32, the smallest
head size vLLM's CPU attention takes). Runs where vLLM imports: `make test-vllm-cpu` (its own
environment, .venv-vllm); skipped elsewhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm")

import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from vpo.data import read_rows  # noqa: E402
from vpo.generate import SamplingSettings, TorchBackend, VLLMBackend, sample_responses  # noqa: E402
from vpo.prompts import rewrite_prompt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GREEDY = SamplingSettings(temperature=0, max_new_tokens=15, seed=0)


@pytest.fixture(scope="module")
def trained_base(tmp_path_factory, tiny_maze_data, tiny_local_settings):
    """The tiny model warm-started long enough to end some answers with its end-of-sequence token."""
    import dataclasses

    from vpo.local.base import build_base_model

    out = tmp_path_factory.mktemp("vllm_base") / "single"
    settings = dataclasses.replace(tiny_local_settings, warm_start_steps=300)
    build_base_model("maze", str(tiny_maze_data), str(out), settings, mode="single", m=3, seed=0)
    return out


@pytest.fixture(scope="module")
def engine(trained_base):
    return VLLMBackend(trained_base, seed=0)


@pytest.fixture(scope="module")
def conversations(tiny_maze_data):
    """The test mazes' single-answer prompts and their three-route rewrites."""
    rows = read_rows(tiny_maze_data, "test")
    return [r["prompt"] for r in rows] + [rewrite_prompt(r["prompt"], mode="multi", m=3, task="maze") for r in rows]


def vllm_tokens(engine, conversations, n, sampling):
    from vllm import SamplingParams

    from vpo.generate import vllm_sampling_kwargs

    outputs = engine.llm.generate(
        engine.token_prompts(conversations), SamplingParams(**vllm_sampling_kwargs(sampling, n)), use_tqdm=False
    )
    return outputs, [[list(c.token_ids) for c in o.outputs] for o in outputs]


def test_the_chat_template_reaches_vllm_as_the_torch_backend_renders_it(engine, trained_base, conversations):
    backend = TorchBackend(trained_base, progress=False)
    outputs, _ = vllm_tokens(engine, conversations, 1, GREEDY)
    for conversation, request in zip(conversations, outputs):
        text = backend.tokenizer.apply_chat_template(
            conversation, add_generation_prompt=True, tokenize=False, enable_thinking=False
        )
        assert list(request.prompt_token_ids) == backend.tokenizer(text, add_special_tokens=False)["input_ids"]


def test_greedy_decoding_gives_the_tokens_the_plain_torch_sampler_and_transformers_give(
    engine, trained_base, conversations, monkeypatch
):
    from transformers import LlamaForCausalLM

    from vpo import llama_sampler

    backend = TorchBackend(trained_base, progress=False)
    assert backend.engine == "vpo.llama_sampler"  # the tiny model: vpo.tiny_llama.TinyLlama, sampled in plain torch
    tok = backend.tokenizer
    eos = tok.eos_token_id
    ids = [o["prompt_token_ids"] for o in engine.token_prompts(conversations)]
    expected = sample_responses(backend.model, tok, ids, 1, GREEDY)  # each ends at (and keeps) its EOS
    with monkeypatch.context() as patch:  # transformers' own model and `generate`
        patch.setattr(llama_sampler, "supports", lambda model: False)
        assert sample_responses(LlamaForCausalLM.from_pretrained(trained_base), tok, ids, 1, GREEDY) == expected
    _, got = vllm_tokens(engine, conversations, 1, GREEDY)
    got = [tokens[0] for tokens in got]
    assert got == expected
    # both stop rules were exercised: some answers ended at the end-of-sequence token, some at the limit
    assert any(t[-1] == eos and len(t) < GREEDY.max_new_tokens for t in got)
    assert any(len(t) == GREEDY.max_new_tokens and eos not in t for t in got)
    texts = engine.generate(conversations, 1, GREEDY)
    assert [t[0] for t in texts] == [t[0] for t in backend.generate(conversations, 1, GREEDY)]


def test_sampling_with_a_seed_repeats_and_the_token_limit_binds(engine, conversations):
    sampling = SamplingSettings(temperature=1.0, top_p=0.95, max_new_tokens=7, seed=5)
    first = engine.generate(conversations, 4, sampling)
    assert engine.generate(conversations, 4, sampling) == first
    assert (
        engine.generate(conversations, 4, SamplingSettings(temperature=1.0, top_p=0.95, max_new_tokens=7, seed=6))
        != first
    )
    assert [len(samples) for samples in first] == [4] * len(conversations)  # n samples per prompt
    assert any(len(set(samples)) > 1 for samples in first)  # the n samples of a prompt are not one sample
    _, tokens = vllm_tokens(engine, conversations, 4, sampling)
    lengths = [len(t) for samples in tokens for t in samples]
    assert max(lengths) == 7


def test_a_pool_larger_than_one_step_of_prefill(engine, conversations):
    """180 seeded sequences of 350-token prompts outgrow one scheduler step: with chunked prefill vLLM's
    CPU build fails there ("CPU Generator does not use offset")."""
    sampling = SamplingSettings(temperature=0.7, max_new_tokens=20, seed=3)
    pools = engine.generate(conversations, 30, sampling)
    assert [len(p) for p in pools] == [30] * len(conversations)
    assert pools == engine.generate(conversations, 30, sampling)


@pytest.fixture(scope="module")
def eval_config(tmp_path_factory):
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw["presets"]["ci"]["task_settings"]["maze"]["eval"] = {
        "budget": 6,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": {"single": 12, "multi": 40},
        "seeds": [0],
        "gpus": 0,
    }
    path = tmp_path_factory.mktemp("cfg") / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def vpo_eval(model, data, config, out, backend, method="vpo"):
    """`vpo eval` as the workflow's eval rule runs it, in its own process."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "vpo.cli",
            "eval",
            "--model",
            str(model),
            "--task",
            "maze",
            "--method",
            method,
            "--data",
            str(data),
            "--seed",
            "0",
            "--preset",
            "ci",
            "--config",
            str(config),
            "--backend",
            backend,
            "--out",
            str(out),
        ],
        check=True,
        cwd=REPO,
    )
    return pd.read_parquet(out), json.loads(Path(out).with_suffix(".json").read_text())


@pytest.mark.parametrize("method", ["vpo", "grpo"])
def test_vpo_eval_with_vllm_writes_what_the_torch_backend_writes(
    method, tiny_base_model, tiny_maze_data, eval_config, tmp_path
):
    import shutil

    model = tmp_path / "runs" / "maze" / method / "seed0" / "model"
    shutil.copytree(tiny_base_model, model)
    frame, info = vpo_eval(model, tiny_maze_data, eval_config, tmp_path / "v1.parquet", "vllm", method)
    again, _ = vpo_eval(model, tiny_maze_data, eval_config, tmp_path / "v2.parquet", "vllm", method)
    reference, ref_info = vpo_eval(model, tiny_maze_data, eval_config, tmp_path / "t.parquet", "torch", method)
    pd.testing.assert_frame_equal(frame, again)  # the same seed samples the same pool
    assert list(frame.columns) == list(reference.columns) and len(frame) == len(reference) == 3 * 6
    assert set(info) == set(ref_info) and info["backend"] == "vllm" and info["train_seed"] == 0
    assert (info["engine"], ref_info["engine"]) == ("vllm", "vpo.llama_sampler")
    m = 3 if method == "vpo" else 1
    assert info["m"] == m and info["chains"] == 6 // m
    assert info["sampling"]["max_new_tokens"] == (40 if method == "vpo" else 12)
    for _, pool in frame.groupby("problem"):
        assert len(pool) == 6 and sorted(pool["chain"].unique()) == list(range(6 // m))
