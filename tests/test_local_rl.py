"""Policy-gradient pieces of the local trainer against hand-computed values."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from vpo.local.rl import low_var_kl, masked_mean, ppo_clip_loss  # noqa: E402
from vpo.local.trainer import batch_indices  # noqa: E402


def test_ppo_clip_loss_hand_values():
    ratios = torch.tensor([[1.5, 0.5, 1.1, 5.0, 9.0]])
    old = torch.zeros_like(ratios)
    logp = torch.log(ratios)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])  # last token is padding
    loss, clipfrac, _ = ppo_clip_loss(logp, old, adv, mask, clip_ratio=0.2, clip_ratio_c=3.0)
    # token 1: max(-1.5, -1.2) = -1.2; token 2: max(-0.5, -0.8) = -0.5; token 3: max(1.1, 1.1) = 1.1;
    # token 4: max(5, 1.2) = 5, dual clip min(5, 3) = 3.
    assert float(loss) == pytest.approx((-1.2 - 0.5 + 1.1 + 3.0) / 4, abs=1e-6)
    # clipped branch chosen on token 1 only (token 4's max is the unclipped branch)
    assert float(clipfrac) == pytest.approx(1 / 4)


def test_ppo_loss_sequence_advantage_broadcasts_and_gradient_sign():
    logp = torch.zeros(2, 3, requires_grad=True)
    loss, _, _ = ppo_clip_loss(logp, torch.zeros(2, 3), torch.tensor([2.0, -1.0]), torch.ones(2, 3), clip_ratio=0.2,
                               clip_ratio_c=3.0)
    loss.backward()
    # At ratio 1, d loss / d logp = -A / (#tokens): positive advantage -> push log-prob up.
    assert torch.allclose(logp.grad, torch.tensor([[-2.0] * 3, [1.0] * 3]) / 6)


def test_low_var_kl_hand_value_and_zero_at_equal_policies():
    logp = torch.tensor([0.0, math.log(0.3)])
    ref = torch.tensor([math.log(0.5), math.log(0.3)])
    kl = low_var_kl(logp, ref)
    assert float(kl[0]) == pytest.approx(0.5 - math.log(0.5) - 1.0, abs=1e-6)
    assert float(kl[1]) == 0.0
    assert float(masked_mean(kl, torch.tensor([1.0, 0.0]))) == pytest.approx(float(kl[0]))


def test_batch_indices_cover_each_epoch_once_and_are_deterministic():
    first_epoch = [i for step in (1, 2, 3) for i in batch_indices(12, 4, step, seed=0)]
    assert sorted(first_epoch) == list(range(12))
    second_epoch = [i for step in (4, 5, 6) for i in batch_indices(12, 4, step, seed=0)]
    assert sorted(second_epoch) == list(range(12)) and second_epoch != first_epoch
    assert batch_indices(12, 4, 5, seed=0) == batch_indices(12, 4, 5, seed=0)
    assert batch_indices(12, 4, 1, seed=1) != batch_indices(12, 4, 1, seed=0)
    with pytest.raises(ValueError, match="prompts_per_step"):
        batch_indices(3, 4, 1, seed=0)


def test_group_pool_diversity_hand_value():
    from vpo.local.trainer import group_pool_diversity

    subs = [np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]), np.array([[0.5, 0.5]]), np.array([[0.5, 0.5]])]
    # group 0: one pair at L1 distance 2; group 1: identical answers, distance 0.
    assert group_pool_diversity(subs, np.array([0, 0, 1, 1])) == pytest.approx(1.0)


def _tiny_policy(seed=0):
    from vpo.tiny_llama import TinyLlama

    torch.manual_seed(seed)
    config = {"architectures": ["LlamaForCausalLM"], "vocab_size": 20, "hidden_size": 16, "intermediate_size": 32,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
              "max_position_embeddings": 64, "pad_token_id": 0, "tie_word_embeddings": True}
    return TinyLlama(config)


def test_every_mini_batchs_old_log_probabilities_are_the_policys_before_the_first_update():
    """Two mini-batches with plain SGD: the second has zero advantages and no KL or entropy term, so its
    update is zero and the policy after the step is the policy after the first update. The second
    mini-batch's reported ppo_kl, mean(old - new) over its tokens, must then equal mean(log p before the
    step - log p after the first update), computed here from a copy taken before the step; the first
    mini-batch's is 0 (its old log-probabilities are its own)."""
    import copy
    import dataclasses

    from vpo.local.group_forward import StepBatch
    from vpo.local.rl import policy_update
    from vpo.settings import LocalTrainerSettings
    from conftest import TINY_LOCAL_TRAINER

    settings = dataclasses.replace(LocalTrainerSettings.from_dict(TINY_LOCAL_TRAINER), ppo_mini_batches=2,
                                   kl_coef=0.0, entropy_coef=0.0, grad_clip=1e9, temperature=1.0)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, 20, (5 + i,), generator=g).tolist() for i in range(4)]
    responses = [torch.randint(1, 20, (2 + i % 5,), generator=g).tolist() for i in range(8)]
    batch = StepBatch(prompts, responses, 2, pad_id=0)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0])
    policy = _tiny_policy()
    before = copy.deepcopy(policy)
    stats = policy_update(policy, torch.optim.SGD(policy.parameters(), lr=0.5), batch, advantages,
                          torch.zeros(8, batch.mask.shape[1]), settings)
    with torch.no_grad():
        old, _ = batch.logprobs(before, groups=slice(2, 4))
        new, _ = batch.logprobs(policy, groups=slice(2, 4))
    mask = batch.mask[4:, :old.shape[1]]
    expected = float(masked_mean(old - new, mask))
    assert abs(expected) > 1e-3  # the first update moved the second mini-batch's log-probabilities
    assert stats["ppo_kl"] == pytest.approx([0.0, expected], abs=1e-6)
