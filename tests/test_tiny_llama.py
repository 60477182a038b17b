"""`vpo.tiny_llama.TinyLlama`, the class the CPU backend runs, against transformers' `LlamaForCausalLM`
loaded from the same directory: logits, the grouped forward's log-probabilities, greedy and seeded
samples, and save-then-load. Two directories: the one `vpo base-model` writes (2 layers, 2 heads of 32,
tied embeddings), and one with every config value the block reads set away from its default (rope theta
500000, rms_norm_eps 1e-5, head size 8 instead of hidden / heads = 12, 4 query heads sharing 2 key/value
heads, untied head)."""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from vpo.generate import SamplingSettings, left_pad, load_pretrained, sample_responses  # noqa: E402
from vpo.tiny_llama import TOKENIZER_FILES, TinyLlama, TinyTokenizer  # noqa: E402


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory, tiny_maze_data):
    from vpo.local.base import build_base_model
    from vpo.settings import LocalTrainerSettings

    from conftest import local_trainer_block

    settings = LocalTrainerSettings.from_dict(local_trainer_block(warm_start_steps=10, warm_start_batch=4))
    out = tmp_path_factory.mktemp("tiny") / "base"
    build_base_model("maze", str(tiny_maze_data), str(out), settings, mode="single", m=3, seed=0)
    return out


@pytest.fixture(scope="module")
def unusual_dir(tmp_path_factory, base_dir):
    """A Llama that transformers builds with non-default rope theta, norm epsilon, head size, shared
    key/value heads and an untied head, with the base model's tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = TinyTokenizer(base_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        max_position_embeddings=512,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(7)
    model = LlamaForCausalLM(config)
    for parameter in model.parameters():  # visible norms and a peaked distribution, not the defaults' ones
        torch.nn.init.normal_(parameter, mean=1.0 if parameter.dim() == 1 else 0.0, std=0.2)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    out = tmp_path_factory.mktemp("tiny") / "unusual"
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copy2(base_dir / name, out / name)
    return out


@pytest.fixture(params=["base", "unusual"])
def model_dir(request, base_dir, unusual_dir):
    return base_dir if request.param == "base" else unusual_dir


def _reference(path):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(path).eval()


def _prompts(vocab: int, n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(4, vocab, (int(torch.randint(3, 15, (1,), generator=g)),), generator=g).tolist() for _ in range(n)
    ]


def test_the_cpu_models_load_as_tiny_llama_with_the_configs_values(model_dir):
    model, tokenizer = load_pretrained(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    assert type(model) is TinyLlama and type(tokenizer) is TinyTokenizer
    from vpo.tiny_llama import Dims

    dims, reference = Dims(model.config), _reference(model_dir).config
    assert (dims.heads, dims.kv_heads, dims.head_dim, dims.eps) == (
        reference.num_attention_heads,
        reference.num_key_value_heads,
        reference.head_dim,
        reference.rms_norm_eps,
    )
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == config["tie_word_embeddings"]


def test_logits_equal_transformers_on_a_left_padded_batch(model_dir):
    model, reference = TinyLlama.from_dir(model_dir), _reference(model_dir)
    input_ids, attention = left_pad(_prompts(model.config.vocab_size), model.config.pad_token_id)
    positions = (attention.cumsum(-1) - 1).masked_fill(attention == 0, 1)
    with torch.no_grad():
        got = model(input_ids, attention)
        expected = reference(input_ids=input_ids, attention_mask=attention, position_ids=positions).logits
    real = attention.bool()
    assert expected[real].abs().max() > 1.0  # not a near-uniform distribution that anything would match
    assert torch.allclose(got[real], expected[real], atol=1e-5, rtol=1e-5)


def test_the_grouped_forward_on_tiny_llama_equals_transformers_per_sequence(model_dir):
    from vpo.local.group_forward import StepBatch

    model, reference = TinyLlama.from_dir(model_dir), _reference(model_dir)
    prompts = _prompts(model.config.vocab_size, n=3, seed=1)
    responses = _prompts(model.config.vocab_size, n=6, seed=2)
    batch = StepBatch(prompts, responses, 2, model.config.pad_token_id)
    with torch.no_grad():
        logp, _ = batch.logprobs(model, temperature=0.7)
        for row, response in enumerate(responses):
            prompt = prompts[row // 2]
            log_probs = torch.log_softmax(reference(torch.tensor([prompt + response])).logits[0] / 0.7, -1)
            expected = [float(log_probs[len(prompt) - 1 + t, token]) for t, token in enumerate(response)]
            assert logp[row, : len(response)].tolist() == pytest.approx(expected, abs=1e-5)


def test_greedy_samples_equal_transformers_generate_and_seeded_ones_repeat(model_dir, monkeypatch):
    """Greedy: the tokens transformers' `generate` picks on its own model. Sampled (vpo/llama_sampler.py
    draws one uniform number per row, `generate` V exponentials: the same distribution, other draws,
    tests/test_llama_sampler.py): the same samples on the same seed, other samples on another."""
    from vpo import llama_sampler

    model, tokenizer = load_pretrained(model_dir)
    reference = _reference(model_dir)
    prompts = _prompts(model.config.vocab_size, n=4, seed=3)
    greedy = SamplingSettings(temperature=0.0, max_new_tokens=20, seed=11)
    got = sample_responses(model, tokenizer, prompts, 3, greedy)
    sampled = [
        sample_responses(model, tokenizer, prompts, 3, SamplingSettings(max_new_tokens=20, seed=s))
        for s in (11, 11, 12)
    ]
    monkeypatch.setattr(llama_sampler, "supports", lambda model: False)  # the reference samples with `generate`
    assert got == sample_responses(reference, tokenizer, prompts, 3, greedy)
    assert sampled[0] == sampled[1] != sampled[2]
    assert len({tuple(r) for r in sampled[0]}) > 1  # sampled, not one sequence repeated


def test_save_then_load_gives_the_same_files(model_dir, tmp_path):
    from safetensors.torch import load_file

    model, tokenizer = load_pretrained(model_dir)
    for out in (tmp_path / "once", tmp_path / "twice"):
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        model, tokenizer = load_pretrained(out)
    for name in ("config.json", "model.safetensors", *TOKENIZER_FILES):
        assert (tmp_path / "once" / name).read_bytes() == (tmp_path / "twice" / name).read_bytes(), name
    for name in TOKENIZER_FILES:
        assert (tmp_path / "once" / name).read_bytes() == (model_dir / name).read_bytes(), name
    original, saved = load_file(model_dir / "model.safetensors"), load_file(tmp_path / "once" / "model.safetensors")
    assert original.keys() == saved.keys() and all(torch.equal(original[k], saved[k]) for k in original)
    # what transformers reads back from the saved directory computes the same logits
    ids = torch.tensor(_prompts(model.config.vocab_size, n=1)[0])[None]
    with torch.no_grad():
        assert torch.equal(_reference(tmp_path / "once")(ids).logits, _reference(model_dir)(ids).logits)


def test_a_saved_tokenizer_is_the_one_loaded_even_if_its_directory_changed(base_dir, tmp_path):
    copy = tmp_path / "base"
    shutil.copytree(base_dir, copy)
    tokenizer = TinyTokenizer(copy)
    (copy / "tokenizer.json").write_text("{}")  # the base model rebuilt while a run holds its tokenizer
    tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / "tokenizer.json").read_bytes() == (base_dir / "tokenizer.json").read_bytes()
