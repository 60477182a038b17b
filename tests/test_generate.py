"""Generation backends: settings translation (no vLLM needed), batched sampling correctness, vLLM e2e."""

import pytest

from vpo.generate import SamplingSettings, hf_generate_kwargs, vllm_sampling_kwargs


def test_vllm_sampling_kwargs_translation():
    s = SamplingSettings(temperature=0.7, top_p=0.95, top_k=-1, max_new_tokens=1024, seed=3)
    assert vllm_sampling_kwargs(s, 10) == {
        "n": 10,
        "temperature": 0.7,
        "top_p": 0.95,
        "top_k": -1,
        "max_tokens": 1024,
        "seed": 3,
    }
    unseeded = vllm_sampling_kwargs(SamplingSettings(top_k=20, max_new_tokens=8, seed=None), 1)
    assert unseeded == {"n": 1, "temperature": 1.0, "top_p": 1.0, "top_k": 20, "max_tokens": 8}
    with pytest.raises(ValueError, match="n must be"):
        vllm_sampling_kwargs(s, 0)


def test_hf_generate_kwargs_translation():
    # transformers disables top-k with 0 (its default is 50, which would change the distribution).
    assert hf_generate_kwargs(SamplingSettings(temperature=0.7, top_p=0.9, max_new_tokens=5)) == {
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 0,
        "max_new_tokens": 5,
    }
    assert hf_generate_kwargs(SamplingSettings(temperature=0, max_new_tokens=5)) == {
        "do_sample": False,
        "max_new_tokens": 5,
    }


@pytest.mark.parametrize(
    "bad", [dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(top_k=0), dict(max_new_tokens=0)]
)
def test_sampling_settings_reject_bad_values(bad):
    with pytest.raises(ValueError):
        SamplingSettings(**bad)


@pytest.fixture(scope="module")
def model_and_prompts(tiny_base_model, tiny_maze_data):
    from vpo.generate import render_prompts
    from vpo.data import read_rows
    from vpo.generate import load_pretrained
    from vpo.prompts import prepare_row

    model, tok = load_pretrained(tiny_base_model)
    rows = read_rows(tiny_maze_data, "test")
    # Single- and multi-answer prompts have different lengths, so the batch is left-padded.
    convs = [
        prepare_row(rows[0], "grpo", 1, 0)["prompt"],
        prepare_row(rows[1], "vpo", 3, 0)["prompt"],
        prepare_row(rows[2], "goal_cond", 1, 0)["prompt"],
    ]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in render_prompts(tok, convs)]
    assert len({len(i) for i in ids}) == 3
    return model, tok, convs, ids


def test_batched_greedy_equals_one_at_a_time(model_and_prompts):
    from vpo.generate import sample_responses

    model, tok, _, ids = model_and_prompts
    greedy = SamplingSettings(temperature=0, max_new_tokens=12)
    batched = sample_responses(model, tok, ids, 2, greedy, batch_size=6)
    single = [r for p in ids for r in sample_responses(model, tok, [p], 2, greedy, batch_size=1)]
    assert batched == single
    for response in batched:
        assert 1 <= len(response) <= 12
        assert tok.eos_token_id not in response[:-1]  # cut at the first EOS


def test_seeded_sampling_is_reproducible(model_and_prompts):
    from vpo.generate import sample_responses

    model, tok, _, ids = model_and_prompts
    s0 = SamplingSettings(temperature=1.0, max_new_tokens=12, seed=0)
    a = sample_responses(model, tok, ids, 4, s0, batch_size=5)
    b = sample_responses(model, tok, ids, 4, s0, batch_size=5)
    c = sample_responses(model, tok, ids, 4, SamplingSettings(temperature=1.0, max_new_tokens=12, seed=1), batch_size=5)
    assert a == b and a != c and len(a) == 12


def test_transformers_backend_interface(model_and_prompts, tiny_base_model):
    from vpo.generate import TorchBackend, make_backend

    _, _, convs, _ = model_and_prompts
    backend = make_backend("torch", tiny_base_model, progress=False, batch_size=4)
    assert isinstance(backend, TorchBackend)
    out = backend.generate(convs, 3, SamplingSettings(max_new_tokens=8, seed=0))
    assert len(out) == 3 and all(len(texts) == 3 and all(isinstance(t, str) for t in texts) for texts in out)
    with pytest.raises(ValueError, match="unknown generation backend"):
        make_backend("tgi", tiny_base_model)


def test_vllm_engine_kwargs_per_machine():
    """On GPUs vLLM gets its memory share; its CPU build would read that share as RAM to reserve, so it
    gets a fixed KV cache, float32 and eager mode instead (tests/test_vllm_cpu.py runs it)."""
    from vpo.generate import CPU_KV_CACHE_BYTES, vllm_engine_kwargs

    assert vllm_engine_kwargs(on_cpu=False, gpu_memory_utilization=0.4) == {"gpu_memory_utilization": 0.4}
    assert vllm_engine_kwargs(on_cpu=True, gpu_memory_utilization=0.4) == {
        "dtype": "float32",
        "enforce_eager": True,
        "kv_cache_memory_bytes": CPU_KV_CACHE_BYTES,
        "enable_chunked_prefill": False,
    }


def test_a_damaged_model_file_is_named_with_the_command_that_rebuilds_it(tmp_path):
    """A truncated merged model.safetensors once stopped evaluation with 'invalid header length' alone."""
    from vpo.generate import load_pretrained
    from vpo.backend import save_pretrained_atomic
    from vpo.local.model import build_model, build_tokenizer
    from vpo.tiny_llama import TinyModelSettings

    tokenizer = build_tokenizer(["a b c"])
    model = build_model(
        len(tokenizer),
        TinyModelSettings(hidden_size=32, num_layers=1, num_heads=1, intermediate_size=32, max_positions=16),
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    out = tmp_path / "results" / "ci" / "runs" / "maze" / "vpo" / "seed0" / "model"
    save_pretrained_atomic(model, tokenizer, out)
    weights = out / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ValueError) as err:
        load_pretrained(out)
    message = str(err.value)
    assert f"{weights} is not a loadable model" in message
    assert f"snakemake --cores all --config preset=ci -f {out}" in message
