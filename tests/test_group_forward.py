"""vpo/local/group_forward.py against transformers: each response's log-probabilities, entropies and
gradients equal those of the model run on that one prompt + response alone (no padding, no batching)."""

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from vpo.local.group_forward import StepBatch, group_response_logprobs  # noqa: E402
from vpo.local.model import build_model  # noqa: E402
from vpo.tiny_llama import TinyModelSettings  # noqa: E402

VOCAB, PAD, BOS, EOS = 30, 0, 1, 2


def tiny_model(heads=2, seed=5):
    settings = TinyModelSettings(hidden_size=32, num_layers=2, num_heads=heads, intermediate_size=64, max_positions=64)
    return build_model(VOCAB, settings, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, seed=seed)


def rollouts(n_prompts=3, n=2, seed=0):
    """Prompts of different lengths (so some are left-padded) and n responses each of different lengths."""
    g = torch.Generator().manual_seed(seed)

    def tokens(low, high):
        return torch.randint(3, VOCAB, (int(torch.randint(low, high, (1,), generator=g)),), generator=g).tolist()

    prompts = [tokens(2, 9) for _ in range(n_prompts)]
    return prompts, [tokens(1, 7) for _ in range(n_prompts * n)]


def expected_per_sequence(model, prompts, responses, n, temperature=1.0):
    """Per response: log p of each token and the entropy at each position, from the model run on
    prompt + response alone (no padding, no batching)."""
    logps, entropies = [], []
    with torch.no_grad():
        for row, response in enumerate(responses):
            prompt = prompts[row // n]
            log_probs = torch.log_softmax(model(torch.tensor([prompt + response])).logits[0] / temperature, -1)
            at = range(len(prompt) - 1, len(prompt) - 1 + len(response))
            logps.append([float(log_probs[t, tok]) for t, tok in zip(at, response)])
            entropies.append([float(-(log_probs[t].exp() * log_probs[t]).sum()) for t in at])
    return logps, entropies


@pytest.mark.parametrize("heads", [2, 4])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_and_entropies_equal_the_model_on_each_unpadded_sequence(heads, temperature):
    model = tiny_model(heads).eval()
    prompts, responses = rollouts(n_prompts=3, n=2)
    batch = StepBatch(prompts, responses, 2, PAD)
    with torch.no_grad():
        logp, entropy = batch.logprobs(model, temperature=temperature, with_entropy=True)
    want_logp, want_entropy = expected_per_sequence(model, prompts, responses, 2, temperature)
    for row, response in enumerate(responses):
        assert logp[row, : len(response)].tolist() == pytest.approx(want_logp[row], abs=1e-5)
        assert entropy[row, : len(response)].tolist() == pytest.approx(want_entropy[row], abs=1e-5)
    assert logp.shape == (6, max(len(r) for r in responses))


@pytest.mark.parametrize("buckets", [1, 4, 20])
def test_any_number_of_length_buckets_gives_each_row_its_own_values(buckets):
    """The rows run in length buckets (here one, some, and more buckets than rows: the empty ones are
    skipped) and come back in their own order, each equal to the model on its sequence alone."""
    model = tiny_model().eval()
    prompts, responses = rollouts(n_prompts=3, n=3, seed=4)
    responses[4] = responses[4] * 4  # one long row among short ones: the buckets' widths differ
    batch = StepBatch(prompts, responses, 3, PAD)
    with torch.no_grad():
        logp, entropy = group_response_logprobs(
            model,
            batch.prompts,
            batch.prompt_attention,
            batch.group_of,
            batch.responses,
            batch.mask,
            with_entropy=True,
            buckets=buckets,
        )
    want_logp, want_entropy = expected_per_sequence(model, prompts, responses, 3)
    assert logp.shape == entropy.shape == batch.responses.shape
    for row, response in enumerate(responses):
        assert logp[row, : len(response)].tolist() == pytest.approx(want_logp[row], abs=1e-5)
        assert entropy[row, : len(response)].tolist() == pytest.approx(want_entropy[row], abs=1e-5)


def test_a_group_slice_gives_the_rows_of_those_prompts():
    model = tiny_model().eval()
    prompts, responses = rollouts(n_prompts=4, n=3, seed=1)
    batch = StepBatch(prompts, responses, 3, PAD)
    with torch.no_grad():
        whole, _ = batch.logprobs(model)
        part, _ = batch.logprobs(model, groups=slice(2, 4))
    rows = responses[6:]
    assert part.shape == (6, max(len(r) for r in rows))  # padding beyond these rows' longest is trimmed
    for i, response in enumerate(rows):
        assert part[i, : len(response)].tolist() == pytest.approx(whole[6 + i, : len(response)].tolist(), abs=1e-5)


def test_gradients_equal_those_of_the_model_run_on_each_unpadded_sequence():
    prompts, responses = rollouts(n_prompts=3, n=3, seed=2)
    weights = torch.linspace(-1.0, 1.0, len(responses))  # a different advantage per response
    tokens = sum(len(r) for r in responses)

    def grads(loss_of):
        model = tiny_model(seed=9)
        loss_of(model).backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    def grouped_loss(model):
        batch = StepBatch(prompts, responses, 3, PAD)
        logp, entropy = batch.logprobs(model, with_entropy=True)
        return ((weights[:, None] * logp - 0.01 * entropy) * batch.mask).sum() / tokens

    def per_sequence_loss(model):
        loss = 0.0
        for row, response in enumerate(responses):
            prompt = prompts[row // 3]
            log_probs = torch.log_softmax(model(torch.tensor([prompt + response])).logits[0], -1)
            at = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(response))
            logp = log_probs[at, torch.tensor(response)]
            entropy = -(log_probs[at].exp() * log_probs[at]).sum(-1)
            loss = loss + (weights[row] * logp - 0.01 * entropy).sum()
        return loss / tokens

    want, got = grads(per_sequence_loss), grads(grouped_loss)
    assert want.keys() == got.keys() and len(want) > 0
    for name in want:
        assert torch.allclose(got[name], want[name], rtol=1e-4, atol=1e-6), name


def test_a_pad_only_prompt_column_and_one_token_responses():
    """The shortest cases: a response of one token is scored by the prompt's last position alone."""
    model = tiny_model().eval()
    prompts, responses = [[5], [6, 7, 8, 9]], [[10], [11], [12], [13, 14]]
    with torch.no_grad():
        logp, _ = StepBatch(prompts, responses, 2, PAD).logprobs(model)
    want, _ = expected_per_sequence(model, prompts, responses, 2)
    for row, response in enumerate(responses):
        assert logp[row, : len(response)].tolist() == pytest.approx(want[row], abs=1e-5)
    assert all(math.isfinite(v) for v in logp.flatten().tolist())


def test_step_batch_refuses_a_response_count_that_is_not_n_per_prompt():
    with pytest.raises(ValueError, match="5 responses for 2 prompts x 3"):
        StepBatch([[3], [4]], [[5]] * 5, 3, PAD)


def test_the_function_reads_group_indices_in_any_order():
    model = tiny_model().eval()
    prompts, responses = [[5, 6, 7], [8, 9]], [[10, 11], [12], [13, 14, 15]]
    from vpo.generate import left_pad

    p_ids, p_att = left_pad(prompts, PAD)
    r_ids = torch.tensor([[10, 11, PAD], [12, PAD, PAD], [13, 14, 15]])
    r_mask = (r_ids != PAD).float()
    group_of = torch.tensor([1, 0, 1])
    with torch.no_grad():
        logp, _ = group_response_logprobs(model, p_ids, p_att, group_of, r_ids, r_mask)
        for row, g in enumerate(group_of.tolist()):
            seq = prompts[g] + responses[row]
            log_probs = torch.log_softmax(model(torch.tensor([seq])).logits[0], -1)
            want = [float(log_probs[len(prompts[g]) - 1 + t, tok]) for t, tok in enumerate(responses[row])]
            assert logp[row, : len(responses[row])].tolist() == pytest.approx(want, abs=1e-5)
