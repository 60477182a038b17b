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
    loss, _, _ = ppo_clip_loss(logp, torch.zeros(2, 3), torch.tensor([2.0, -1.0]), torch.ones(2, 3))
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
