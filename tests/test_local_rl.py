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
    loss, _, _ = ppo_clip_loss(
        logp, torch.zeros(2, 3), torch.tensor([2.0, -1.0]), torch.ones(2, 3), clip_ratio=0.2, clip_ratio_c=3.0
    )
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


def test_low_var_kl_is_bounded_at_10_and_finite_where_the_policy_gives_a_token_no_mass():
    # ref - logp = 2 gives e^2 - 3 = 4.39 (under the bound); 5 gives 142 -> 10; a token the policy gives
    # probability 0 (log p = -inf) gives 10, not inf or nan
    logp = torch.tensor([-2.0, -5.0, -float("inf"), 3.0])
    kl = low_var_kl(logp, torch.tensor([0.0, 0.0, 0.0, 0.0]))
    assert kl.tolist() == pytest.approx([math.exp(2) - 3, 10.0, 10.0, math.exp(-3) + 2], abs=1e-5)


def test_ppo_clip_loss_bounds_the_log_ratio_of_its_kl_statistic_at_20():
    logp = torch.tensor([[30.0, -30.0, 1.0]])
    _, _, approx_kl = ppo_clip_loss(
        logp, torch.zeros_like(logp), torch.tensor([1.0]), torch.ones_like(logp), clip_ratio=0.2, clip_ratio_c=3.0
    )
    assert float(approx_kl) == pytest.approx((-20.0 + 20.0 - 1.0) / 3)


def test_ppo_clip_loss_clips_below_for_negative_advantages_and_dual_clips_only_them():
    ratios = torch.tensor([[0.5, 5.0]])
    adv = torch.tensor([[-1.0, 0.5]])
    loss, _, _ = ppo_clip_loss(
        torch.log(ratios), torch.zeros_like(ratios), adv, torch.ones_like(ratios), clip_ratio=0.2, clip_ratio_c=3.0
    )
    # token 1: max(0.5, 0.8) = 0.8, under the dual bound 3; token 2 (A > 0): max(-2.5, -0.6) = -0.6, no dual clip
    assert float(loss) == pytest.approx((0.8 - 0.6) / 2, abs=1e-6)


def test_the_optimizer_is_adamw_with_verls_constants_and_the_settings_rate_and_decay():
    import dataclasses

    from conftest import TINY_LOCAL_TRAINER
    from vpo.local.adamw import AdamW
    from vpo.local.rl import optimizer_for
    from vpo.settings import LocalTrainerSettings

    settings = dataclasses.replace(LocalTrainerSettings.from_dict(TINY_LOCAL_TRAINER), lr=0.003, weight_decay=0.05)
    policy = torch.nn.Linear(3, 2)
    optimizer = optimizer_for(policy, settings)
    group = optimizer.param_groups[0]
    assert type(optimizer) is AdamW and group["params"] == list(policy.parameters())
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (0.003, (0.9, 0.999), 1e-8, 0.05)


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
    from vpo.metrics import group_pool_diversity

    subs = [np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]), np.array([[0.5, 0.5]]), np.array([[0.5, 0.5]])]
    # group 0: one pair at L1 distance 2; group 1: identical answers, distance 0.
    assert group_pool_diversity(subs, np.array([0, 0, 1, 1])) == pytest.approx(1.0)


def _tiny_policy(seed=0):
    from vpo.tiny_llama import TinyLlama

    torch.manual_seed(seed)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": 20,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 64,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
    }
    return TinyLlama(config)


@pytest.mark.parametrize("mini_batches", [2, 3])
def test_every_mini_batchs_old_log_probabilities_are_the_policys_before_the_first_update(mini_batches):
    """Two or three mini-batches with plain SGD: the later ones have zero advantages and no KL or entropy term,
    so their updates are zero and the policy after the step is the policy after the first update. Their
    reported ppo_kl, mean(old - new) over their tokens, must then equal mean(log p before the step - log p
    after the first update) at the sampling temperature, computed here from a copy taken before the step;
    the first mini-batch's is 0 (its old log-probabilities are its own)."""
    import copy
    import dataclasses

    from vpo.local.group_forward import StepBatch
    from vpo.local.rl import policy_update
    from vpo.settings import LocalTrainerSettings
    from conftest import TINY_LOCAL_TRAINER

    settings = dataclasses.replace(
        LocalTrainerSettings.from_dict(TINY_LOCAL_TRAINER),
        ppo_mini_batches=mini_batches,
        kl_coef=0.0,
        entropy_coef=0.0,
        grad_clip=1e9,
        temperature=0.7,
    )
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, 20, (5 + i,), generator=g).tolist() for i in range(2 * mini_batches)]
    responses = [torch.randint(1, 20, (2 + i % 5,), generator=g).tolist() for i in range(4 * mini_batches)]
    batch = StepBatch(prompts, responses, 2, pad_id=0)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5] + [0.0] * 4 * (mini_batches - 1))
    policy = _tiny_policy()
    before = copy.deepcopy(policy)
    stats = policy_update(
        policy,
        torch.optim.SGD(policy.parameters(), lr=0.5),
        batch,
        advantages,
        torch.zeros(4 * mini_batches, batch.mask.shape[1]),
        settings,
    )
    assert set(stats) == {"pg_loss", "kl", "entropy", "clipfrac", "ppo_kl", "grad_norm"}
    assert all(len(values) == mini_batches for values in stats.values())
    expected = [0.0]
    for groups in [slice(2 * mb, 2 * mb + 2) for mb in range(1, mini_batches)]:
        with torch.no_grad():
            old, _ = batch.logprobs(before, groups=groups, temperature=0.7)
            new, _ = batch.logprobs(policy, groups=groups, temperature=0.7)
        rows = slice(2 * groups.start, 2 * groups.stop)
        expected.append(float(masked_mean(old - new, batch.mask[rows, : old.shape[1]])))
    assert min(abs(e) for e in expected[1:]) > 1e-3  # the first update moved the later mini-batches' log-probabilities
    assert stats["ppo_kl"] == pytest.approx(expected, abs=1e-6)


def test_one_update_descends_the_ppo_loss_plus_kl_minus_entropy_at_the_sampling_temperature():
    """One mini-batch, plain SGD: the update equals lr x the gradient of pg_loss + kl_coef x KL - entropy_coef x
    entropy, built here from the tested pieces on the grouped forward at temperature 0.7."""
    import copy
    import dataclasses

    from conftest import TINY_LOCAL_TRAINER
    from vpo.local.group_forward import StepBatch
    from vpo.local.rl import policy_update
    from vpo.settings import LocalTrainerSettings

    settings = dataclasses.replace(
        LocalTrainerSettings.from_dict(TINY_LOCAL_TRAINER),
        ppo_mini_batches=1,
        kl_coef=0.3,
        entropy_coef=0.2,
        grad_clip=1e9,
        temperature=0.7,
    )
    g = torch.Generator().manual_seed(4)
    batch = StepBatch(
        [torch.randint(1, 20, (6,), generator=g).tolist() for _ in range(2)],
        [torch.randint(1, 20, (3 + i,), generator=g).tolist() for i in range(4)],
        2,
        pad_id=0,
    )
    advantages = torch.tensor([1.0, -1.0, 0.3, -0.3])
    policy = _tiny_policy(seed=2)
    expected = copy.deepcopy(policy)
    logp, entropy = batch.logprobs(expected, temperature=0.7, with_entropy=True)
    # a reference within 0.5 of the policy on every token: its KL term has a gradient (past a log-ratio of 2.62
    # the KL is clamped at 10 and has none)
    reference_logp = logp.detach() + torch.rand(logp.shape, generator=g) - 0.5
    mask = batch.mask[:, : logp.shape[1]]
    pg, _, _ = ppo_clip_loss(logp, logp.detach(), advantages, mask, clip_ratio=0.2, clip_ratio_c=3.0)
    loss = (
        pg
        + 0.3 * masked_mean(low_var_kl(logp, reference_logp[:, : logp.shape[1]]), mask)
        - 0.2 * masked_mean(entropy, mask)
    )
    loss.backward()
    policy_update(policy, torch.optim.SGD(policy.parameters(), lr=0.1), batch, advantages, reference_logp, settings)
    for (name, got), want in zip(policy.named_parameters(), expected.parameters()):
        assert torch.allclose(got, want.detach() - 0.1 * want.grad, atol=1e-6), name


def test_a_batch_that_does_not_split_into_whole_groups_per_mini_batch_is_refused():
    import dataclasses

    from conftest import TINY_LOCAL_TRAINER
    from vpo.local.group_forward import StepBatch
    from vpo.local.rl import policy_update
    from vpo.settings import LocalTrainerSettings

    settings = dataclasses.replace(LocalTrainerSettings.from_dict(TINY_LOCAL_TRAINER), ppo_mini_batches=2)
    batch = StepBatch([[1, 2], [3, 4], [5, 6]], [[1], [2], [3], [4], [5], [6]], 2, pad_id=0)
    policy = _tiny_policy()
    with pytest.raises(ValueError, match="3 prompts do not split into 2 equal mini-batches"):
        policy_update(
            policy, torch.optim.SGD(policy.parameters(), lr=0.1), batch, torch.zeros(6), torch.zeros(6, 1), settings
        )
