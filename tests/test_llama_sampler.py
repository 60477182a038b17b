"""vpo/llama_sampler.py against transformers: the same logits, the same greedy sequences as
`model.generate`, and sampled ones (temperature, top-k, top-p) from the same distribution (its draws take
one uniform number per row, `generate`'s V exponentials: equal in distribution, not draw for draw), left
padding and early stops included."""

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


def generate_groups(model, input_ids, attention, n: int, **sampling):
    """transformers' `generate` past the prompt for each left-padded prompt (input_ids, attention: (G, P))
    repeated n times, prompt-major: the rows `sampler.sample_groups` returns."""
    with torch.no_grad():
        return model.generate(
            input_ids=input_ids.repeat_interleave(n, 0),
            attention_mask=attention.repeat_interleave(n, 0),
            pad_token_id=PAD,
            eos_token_id=EOS,
            **sampling,
        )[:, input_ids.shape[1] :]


def test_greedy_sequences_match_generate(model):
    """6 prompts x 3 rollouts greedily against `generate` on the 18 rows (each prompt repeated 3 times)."""
    n = 3
    input_ids, attention = left_pad(prompts(6, seed=1), PAD)
    expected = generate_groups(model, input_ids, attention, n, max_new_tokens=24, do_sample=False)
    got = sampler.sample_groups(
        model, input_ids, attention, n, max_new_tokens=24, eos=EOS, pad=PAD, temperature=0.0, top_k=0, top_p=1.0
    )
    assert got.tolist() == expected.tolist()


def test_finished_rows_leave_the_decoder_and_stay_padded(model, monkeypatch):
    """6 prompts x 3 rollouts of up to 160 near-uniform tokens: most stop early; the decoder drops the
    finished ones first when at most a quarter (4 of 18) are left, then whenever a quarter of those left
    finish; past its EOS a row holds only pads."""
    kept = []
    keep = sampler.GroupedDecoder.keep
    monkeypatch.setattr(sampler.GroupedDecoder, "keep", lambda self, rows: kept.append(len(rows)) or keep(self, rows))
    input_ids, attention = left_pad(prompts(6, seed=1), PAD)
    torch.manual_seed(5)
    got = sampler.sample_groups(
        model, input_ids, attention, 3, max_new_tokens=160, eos=EOS, pad=PAD, temperature=1.0, top_k=0, top_p=1.0
    )
    assert kept and kept[0] <= 4 and kept == sorted(kept, reverse=True) and len(set(kept)) == len(kept)
    ended = [row.index(EOS) for row in got.tolist() if EOS in row]
    assert len(ended) >= 14 and got.shape[1] == 160  # most ended; one at least ran to the limit
    for row in got.tolist():
        if EOS in row:
            assert set(row[row.index(EOS) + 1 :]) <= {PAD}
    assert len({tuple(row) for row in got.tolist()}) == len(got)  # a group's rollouts are drawn apart


def chi_square_p(observed, expected):
    """The p-value of observed counts against expected counts over the cells where expected > 0."""
    from scipy.stats import chisquare

    keep = expected > 0
    return chisquare(observed[keep], expected[keep] * observed[keep].sum() / expected[keep].sum()).pvalue


@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (5, 1.0), (0, 0.8)])
def test_draw_follows_the_probabilities(top_k, top_p):
    """200,000 draws of one row: the counts fit the warped probabilities (chi-square, p > 0.001) and a
    token of probability 0 (removed by top-k or top-p) is never drawn; rows are drawn independently."""
    torch.manual_seed(0)
    logits = torch.randn(VOCAB) * 2
    probs = sampler._warp(logits[None], 1.0, top_k, top_p).softmax(-1)[0]
    draws = sampler.draw(probs.expand(200_000, VOCAB).contiguous())
    counts = torch.bincount(draws, minlength=VOCAB).double()
    assert counts[probs == 0].sum() == 0 and (probs == 0).any() == (top_k > 0 or top_p < 1)
    assert chi_square_p(counts.numpy(), probs.double().numpy()) > 1e-3
    pairs = sampler.draw(torch.full((100_000, 2), 0.5)).view(50_000, 2)  # two fair coins per row
    joint = torch.bincount(pairs[:, 0] * 2 + pairs[:, 1], minlength=4).double()
    assert chi_square_p(joint.numpy(), torch.ones(4).double().numpy()) > 1e-3


def test_a_first_token_is_drawn_from_the_models_distribution(model):
    """The first token of 4,000 rollouts of one prompt against the model's own next-token probabilities
    (transformers' forward; chi-square, p > 0.001), at temperature 0.7 with top-p 0.9."""
    prompt = prompts(1, seed=4)
    input_ids, attention = left_pad(prompt, PAD)
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits[0, -1]
    probs = sampler._warp(logits[None], 0.7, 0, 0.9).softmax(-1)[0]
    torch.manual_seed(6)
    got = sampler.sample_groups(
        model, input_ids, attention, 4000, max_new_tokens=1, eos=EOS, pad=PAD, temperature=0.7, top_k=0, top_p=0.9
    )
    counts = torch.bincount(got[:, 0], minlength=VOCAB).double()
    assert counts[probs == 0].sum() == 0 and (probs == 0).any()
    assert chi_square_p(counts.numpy(), probs.double().numpy()) > 1e-3


def test_sampled_sequences_match_generate_in_distribution(model):
    """3,000 rollouts of each of 2 prompts against 3,000 of `generate`: at each of the first 4 positions,
    the two samplers' token counts (EOS and the pad after it included) are one distribution (two-sample
    chi-square, p > 0.001); the sampler's draws are not `generate`'s (README: equal in distribution)."""
    from scipy.stats import chi2_contingency

    n, steps = 3000, 4
    input_ids, attention = left_pad(prompts(2, seed=5), PAD)
    torch.manual_seed(7)
    got = sampler.sample_groups(
        model, input_ids, attention, n, max_new_tokens=steps, eos=EOS, pad=PAD, temperature=1.0, top_k=0, top_p=1.0
    )
    expected = generate_groups(model, input_ids, attention, n, max_new_tokens=steps, do_sample=True, top_k=0)
    assert got.shape == expected.shape and not torch.equal(got, expected)
    for group in range(2):
        rows = slice(group * n, (group + 1) * n)
        for position in range(steps):
            table = torch.stack([torch.bincount(x[rows, position], minlength=VOCAB) for x in (got, expected)]).numpy()
            table = table[:, table.sum(0) > 0]
            assert chi2_contingency(table).pvalue > 1e-3, (group, position)


def test_sample_responses_batches_whole_groups_either_way(model, monkeypatch):
    """Batches of whole groups (2 prompts x 3 rollouts in batches of 7 sequences), the same greedy
    sequences by the sampler and by `generate`; sampled ones repeat on a seed."""
    from vpo.generate import SamplingSettings, sample_responses

    class Tokenizer:
        eos_token_id, pad_token_id = EOS, PAD

    ids = prompts(5, seed=3)
    sampling = SamplingSettings(max_new_tokens=12, seed=0)
    fast = sample_responses(model, Tokenizer(), ids, 3, sampling, batch_size=7)
    assert sample_responses(model, Tokenizer(), ids, 3, sampling, batch_size=7) == fast
    greedy = SamplingSettings(temperature=0.0, max_new_tokens=12)
    fast_greedy = sample_responses(model, Tokenizer(), ids, 3, greedy, batch_size=7)
    monkeypatch.setattr(sampler, "supports", lambda model: False)
    assert sample_responses(model, Tokenizer(), ids, 3, greedy, batch_size=7) == fast_greedy
    assert len(fast) == 15 and all(1 <= len(r) <= 12 for r in fast)
    assert all(r[-1] == EOS for r in fast if len(r) < 12) and not any(EOS in r[:-1] for r in fast)
