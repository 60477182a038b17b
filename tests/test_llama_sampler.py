"""vpo/llama_sampler.py against transformers: the same logits, and on a seed the same sequences that
`model.generate` samples (greedy, temperature, top-k and top-p), left padding and early stops included."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from vpo.generate import left_pad  # noqa: E402
from vpo import llama_sampler as sampler  # noqa: E402
from vpo.local.model import build_model  # noqa: E402
from vpo.tiny_llama import TinyModelSettings  # noqa: E402

VOCAB, PAD, BOS, EOS = 40, 0, 1, 2


@pytest.fixture(scope="module")
def model():
    settings = TinyModelSettings(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, max_positions=256)
    return build_model(VOCAB, settings, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, seed=3).eval()


def prompts(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def test_supports_the_tiny_llama_only(model):
    assert sampler.supports(model)
    assert not sampler.supports(torch.nn.Linear(2, 2))


def test_a_bfloat16_model_keeps_generate(model):
    """veRL's merged models are bfloat16: the sampler once mixed float32 queries with bfloat16 keys."""
    import copy

    from vpo.generate import SamplingSettings, sample_responses

    half = copy.deepcopy(model).to(torch.bfloat16)
    assert not sampler.supports(half)

    class Tokenizer:
        eos_token_id, pad_token_id = EOS, PAD

    responses = sample_responses(half, Tokenizer(), prompts(3), 2, SamplingSettings(max_new_tokens=6, seed=0))
    assert len(responses) == 6 and all(1 <= len(r) <= 6 for r in responses)


def test_prefill_logits_match_transformers(model):
    input_ids, attention = left_pad(prompts(), PAD)
    positions = (attention.cumsum(-1) - 1).masked_fill(attention == 0, 1)
    expected = model(input_ids=input_ids, attention_mask=attention, position_ids=positions).logits[:, -1]
    run = sampler.KVSampler(model)
    length = input_ids.shape[1]
    shape = (2, len(input_ids), 2, length, 32)
    allowed = torch.ones(length, length, dtype=torch.bool).tril()[None, None] & attention.bool()[:, None, None, :]
    allowed = allowed | torch.eye(length, dtype=torch.bool)[None, None]
    with torch.no_grad():
        got = run.forward(input_ids, positions, torch.zeros(shape), torch.zeros(shape), 0, allowed)
    assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("settings", [
    dict(temperature=0.0, top_k=0, top_p=1.0),
    dict(temperature=1.0, top_k=0, top_p=1.0),
    dict(temperature=0.7, top_k=5, top_p=1.0),
    dict(temperature=1.0, top_k=0, top_p=0.8),
])
def test_sequences_match_generate_on_a_seed(model, settings):
    input_ids, attention = left_pad(prompts(8, seed=1), PAD)
    hf = {"do_sample": settings["temperature"] > 0, "max_new_tokens": 24}
    if settings["temperature"] > 0:
        hf.update(temperature=settings["temperature"], top_k=settings["top_k"], top_p=settings["top_p"])
    torch.manual_seed(5)
    with torch.no_grad():
        expected = model.generate(input_ids=input_ids, attention_mask=attention, pad_token_id=PAD, eos_token_id=EOS,
                                  **hf)[:, input_ids.shape[1]:]
    torch.manual_seed(5)
    got = sampler.sample_batch(model, input_ids, attention, max_new_tokens=24, eos=EOS, pad=PAD, **settings)
    assert got.tolist() == expected.tolist()
    if settings["temperature"] > 0:  # near-uniform over 40 tokens: some rows stop early, and are padded
        assert (got == EOS).any() and (got == PAD).any()
