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
    return [
        torch.randint(3, VOCAB, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist() for _ in range(n)
    ]


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


def grouped_model(kv_heads):
    """A float32 Llama with 4 query heads over `kv_heads` key/value heads (another rope theta too)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=128,
        rope_theta=500.0,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
    )
    torch.manual_seed(1)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_decoder_logits_match_transformers_forward(kv_heads):
    """Prefill and every decoding step: the logits transformers computes for the whole row (left-padded
    prompt + the rollout's tokens so far), for 3 rollouts of each of 4 prompts of different lengths; from
    step 3 on for 5 of the 12 rollouts only (`keep`: each with its own prompt's cache), from step 5 on 2."""
    model, n, steps = grouped_model(kv_heads), 3, 7
    input_ids, attention = left_pad(prompts(4, seed=2), PAD)
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(3, VOCAB, (4 * n, steps), generator=g)
    rows, rows_attention = input_ids.repeat_interleave(n, 0), attention.repeat_interleave(n, 0)
    decoder = sampler.GroupedDecoder(model, n, steps + 1)
    kept = {3: torch.tensor([0, 4, 5, 9, 11]), 5: torch.tensor([1, 3])}  # the second indexes the first
    decoded = torch.arange(4 * n)
    with torch.no_grad():
        got = [(decoded, decoder.prefill(input_ids, attention))]
        for t in range(steps):
            if t in kept:
                decoder.keep(kept[t])
                decoded = decoded[kept[t]]
            got.append((decoded, decoder.step(tokens[decoded, t], t)))
        full = torch.cat([rows, tokens], 1)
        full_attention = torch.cat([rows_attention, torch.ones_like(tokens)], 1)
        positions = (full_attention.cumsum(-1) - 1).masked_fill(full_attention == 0, 1)
        expected = model(input_ids=full, attention_mask=full_attention, position_ids=positions).logits
    width = input_ids.shape[1]
    assert [len(d) for d, _ in got] == [12] * 4 + [5] * 2 + [2] * 2
    for t, (decoded, logits) in enumerate(got):
        assert torch.allclose(logits, expected[decoded, width - 1 + t], atol=1e-5), t


@pytest.mark.parametrize(
    "settings",
    [
        dict(temperature=0.0, top_k=0, top_p=1.0),
        dict(temperature=1.0, top_k=0, top_p=1.0),
        dict(temperature=0.7, top_k=5, top_p=1.0),
        dict(temperature=1.0, top_k=0, top_p=0.8),
    ],
)
@pytest.mark.parametrize("max_new_tokens", [24, 160])
def test_sequences_match_generate_on_a_seed(model, settings, max_new_tokens, monkeypatch):
    """6 prompts x 3 rollouts against `generate` on the 18 rows (each prompt repeated 3 times); at 160
    tokens most sampled rows stop early, so the decoder drops finished rows (`keep`) on the way."""
    n = 3
    kept = []
    keep = sampler.GroupedDecoder.keep
    monkeypatch.setattr(sampler.GroupedDecoder, "keep", lambda self, rows: kept.append(len(rows)) or keep(self, rows))
    input_ids, attention = left_pad(prompts(6, seed=1), PAD)
    hf = {"do_sample": settings["temperature"] > 0, "max_new_tokens": max_new_tokens}
    if settings["temperature"] > 0:
        hf.update(temperature=settings["temperature"], top_k=settings["top_k"], top_p=settings["top_p"])
    torch.manual_seed(5)
    with torch.no_grad():
        expected = model.generate(
            input_ids=input_ids.repeat_interleave(n, 0),
            attention_mask=attention.repeat_interleave(n, 0),
            pad_token_id=PAD,
            eos_token_id=EOS,
            **hf,
        )[:, input_ids.shape[1] :]
    torch.manual_seed(5)
    got = sampler.sample_groups(
        model, input_ids, attention, n, max_new_tokens=max_new_tokens, eos=EOS, pad=PAD, **settings
    )
    assert got.tolist() == expected.tolist()
    if settings == dict(temperature=1.0, top_k=0, top_p=1.0) and max_new_tokens > 24:
        # near-uniform draws: most rows stop early; dropped at a quarter (4 of 18) left, then at fewer
        assert kept and kept[0] <= 4 and kept == sorted(kept, reverse=True) and len(set(kept)) == len(kept)
    if settings["temperature"] > 0:  # near-uniform over 40 tokens: some rows stop early, and are padded
        assert (got == EOS).any() and (got == PAD).any()
        assert len({tuple(row) for row in got.tolist()}) == len(got)  # a group's rollouts are drawn apart


def test_sample_responses_batches_whole_groups_either_way(model, monkeypatch):
    """Batches of whole groups (2 prompts x 3 rollouts in batches of 7 sequences), the same sequences by
    the sampler and by `generate`."""
    from vpo.generate import SamplingSettings, sample_responses

    class Tokenizer:
        eos_token_id, pad_token_id = EOS, PAD

    ids = prompts(5, seed=3)
    sampling = SamplingSettings(max_new_tokens=12, seed=0)
    fast = sample_responses(model, Tokenizer(), ids, 3, sampling, batch_size=7)
    monkeypatch.setattr(sampler, "supports", lambda model: False)
    assert sample_responses(model, Tokenizer(), ids, 3, sampling, batch_size=7) == fast
    assert len(fast) == 15 and all(1 <= len(r) <= 12 for r in fast)
    assert all(r[-1] == EOS for r in fast if len(r) < 12) and not any(EOS in r[:-1] for r in fast)
