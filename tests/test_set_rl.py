"""Set RL with the polychromic objective (Poly-EPO) and GRPO+DIV, against expectations derived without the
estimator's code: brute force over subsets, the papers' worked example, the Max@k identity, and the
unbiasedness of the estimate on a softmax policy by exact enumeration of every group."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from vpo.advantage import grpo_div_advantage, max_at_k_advantage, set_rl_advantage
from vpo.set_rl import all_sets, group_set_advantages, key_codes


def brute_force(rewards, keys, n, aggregation, homogeneous, degenerate="degenerate"):
    """One group's advantages by plain loops over every n-subset."""
    size = len(rewards)
    sets = list(itertools.combinations(range(size), n))

    def f(members):
        distinct = {keys[i] for i in members if keys[i] != degenerate}
        d = len(distinct) / n
        if homogeneous == "paper" and len(distinct) <= 1:
            d = 0.0
        return sum(rewards[i] for i in members) / n * d

    scores = {s: f(s) for s in sets}
    baseline = sum(scores.values()) / len(sets)
    out = []
    for i in range(size):
        mine = [scores[s] - baseline for s in sets if i in s]
        out.append(sum(mine) / (len(mine) if aggregation == "mean" else 1))
    return np.array(out)


@pytest.mark.parametrize("aggregation", ["mean", "sum"])
@pytest.mark.parametrize("homogeneous", ["paper", "code"])
def test_every_subset_by_brute_force_on_random_groups(aggregation, homogeneous):
    rng = np.random.default_rng(7)
    rewards, keys, groups, expected = [], [], [], []
    for group, (size, n) in enumerate([(5, 2), (6, 3), (7, 3), (8, 4), (6, 3), (4, 2)]):
        r = rng.random(size).round(2) * (rng.random(size) < 0.7)
        k = [rng.choice(["a", "b", "c", "degenerate"]) for _ in range(size)]
        rewards += list(r)
        keys += k
        groups += [group] * size
        expected.append(brute_force(r, k, n, aggregation, homogeneous))
    # one call per set size: groups of other sizes than n + ... are all computed with their own n
    for n in (2, 3, 4):
        chosen = [g for g, (size, m) in enumerate([(5, 2), (6, 3), (7, 3), (8, 4), (6, 3), (4, 2)]) if m == n]
        mask = np.isin(groups, chosen)
        adv, _ = set_rl_advantage(
            np.array(rewards)[mask], np.array(groups)[mask], strategy_keys=[k for k, m in zip(keys, mask) if m],
            set_size=n, aggregation=aggregation, homogeneous=homogeneous,
        )  # fmt: skip
        np.testing.assert_allclose(adv, np.concatenate([expected[g] for g in chosen]), atol=1e-12)


def test_the_worked_example_gives_a_failed_novel_rollout_a_positive_advantage_under_the_papers_rule():
    """N = 4, n = 2; rewards 1, 1, 0, 0; strategies A, A, A, B (the fourth failed with a new strategy)."""
    paper, _ = set_rl_advantage([1, 1, 0, 0], [0] * 4, strategy_keys=list("AAAB"), set_size=2)
    code, _ = set_rl_advantage([1, 1, 0, 0], [0] * 4, strategy_keys=list("AAAB"), set_size=2, homogeneous="code")
    np.testing.assert_allclose(paper, [0, 0, -1 / 6, 1 / 6], atol=1e-12)
    np.testing.assert_allclose(code, [1 / 12, 1 / 12, -1 / 6, 0], atol=1e-12)
    summed, _ = set_rl_advantage([1, 1, 0, 0], [0] * 4, strategy_keys=list("AAAB"), set_size=2, aggregation="sum")
    np.testing.assert_allclose(summed, 3 * paper, atol=1e-12)  # each rollout is in C(3, 1) = 3 sets
    from vpo.advantage import grpo_advantage

    np.testing.assert_allclose(grpo_advantage([1, 1, 0, 0], [0] * 4, norm_by_std=False), [0.5, 0.5, -0.5, -0.5])


def test_more_hand_computed_groups():
    """Rewards 1, 1, 0, 1 with strategies A, A, B, C (n = 2); rewards 1, 1, 1, 0 with A, A, A, B (n = 3)."""
    for rule, expected in (("code", [0, 0, -1 / 6, 1 / 6]), ("paper", [-1 / 12, -1 / 12, -1 / 12, 1 / 4])):
        adv, _ = set_rl_advantage([1, 1, 0, 1], [0] * 4, strategy_keys=list("AABC"), set_size=2, homogeneous=rule)
        np.testing.assert_allclose(adv, expected, atol=1e-12)
    for rule, expected in (("code", [-1 / 108] * 3 + [1 / 36]), ("paper", [-1 / 27] * 3 + [1 / 9])):
        adv, _ = set_rl_advantage([1, 1, 1, 0], [0] * 4, strategy_keys=list("AAAB"), set_size=3, homogeneous=rule)
        np.testing.assert_allclose(adv, expected, atol=1e-12)


def test_set_rl_with_the_max_of_a_set_z_normalised_is_max_at_k():
    """f(S) = max reward over S, the mean form, then the group z-normalisation: the Max@k estimator."""
    rng = np.random.default_rng(3)
    for size, n in ((6, 2), (8, 4), (7, 3)):
        rewards = rng.random((5, size)) * (rng.random((5, size)) < 0.6)
        raw = group_set_advantages(
            rewards, np.zeros_like(rewards, dtype=np.int64), lambda r, c: r.max(axis=-1),
            set_size=n, aggregation="mean", n_sets=None, rng=rng,
        )  # fmt: skip
        z = (raw - raw.mean(axis=1, keepdims=True)) / raw.std(axis=1, ddof=1, keepdims=True)
        groups = np.repeat(np.arange(5), size)  # eps 0: the two raw scores differ by a constant factor
        np.testing.assert_allclose(z.ravel(), max_at_k_advantage(rewards.ravel(), groups, k=n, eps=0.0), atol=1e-12)


def test_mean_form_advantages_sum_to_zero_per_group_and_small_groups_get_zero():
    rng = np.random.default_rng(11)
    groups = np.repeat(np.arange(6), [8, 8, 4, 3, 8, 5])
    rewards = rng.random(len(groups))
    keys = list(rng.choice(list("abcd"), size=len(groups)))
    adv, diagnostics = set_rl_advantage(rewards, groups, strategy_keys=keys, set_size=4)
    sums = np.bincount(groups, weights=adv)
    np.testing.assert_allclose(sums, 0.0, atol=1e-12)
    assert np.all(adv[np.isin(groups, [2, 3])] == 0.0) and diagnostics["set_rl/skipped_groups"] == 2.0


def softmax_case():
    """A policy over 3 outcomes (reward, strategy) with logits theta: its probabilities and each outcome's
    grad log p (rows: outcomes, columns: the logits)."""
    theta = np.array([0.3, -0.2, 0.5])
    p = np.exp(theta) / np.exp(theta).sum()
    rewards, keys = np.array([1.0, 0.6, 0.0]), ["x", "y", "z"]
    score = np.eye(3) - p  # grad log p(y) = e_y - p
    return p, rewards, keys, score


@pytest.mark.parametrize("aggregation, homogeneous", [("sum", "paper"), ("sum", "code"), ("mean", "paper")])
def test_the_estimate_is_unbiased_for_the_set_objective_on_a_softmax_policy(aggregation, homogeneous):
    """E over every group of N draws of sum_i grad log p(y_i) A(y_i) = C(N - 1, n) grad E[f] (sum form) and
    (N - n) / n grad E[f] (mean form), E[f] over n i.i.d. draws, both computed by enumeration."""
    p, rewards, keys, score = softmax_case()
    size, n = 5, 3

    def f(members):
        distinct = {keys[y] for y in members}
        d = len(distinct) / n if homogeneous == "code" or len(distinct) > 1 else 0.0
        return np.mean([rewards[y] for y in members]) * d

    true_grad = sum(
        np.prod(p[list(ys)]) * f(ys) * score[list(ys)].sum(axis=0) for ys in itertools.product(range(3), repeat=n)
    )
    expected = np.zeros(3)
    for ys in itertools.product(range(3), repeat=size):
        adv, _ = set_rl_advantage(
            rewards[list(ys)], [0] * size, strategy_keys=[keys[y] for y in ys], set_size=n,
            aggregation=aggregation, homogeneous=homogeneous,
        )  # fmt: skip
        expected += np.prod(p[list(ys)]) * (adv[:, None] * score[list(ys)]).sum(axis=0)
    constant = math.comb(size - 1, n) if aggregation == "sum" else (size - n) / n
    np.testing.assert_allclose(expected, constant * true_grad, rtol=1e-10, atol=1e-14)


def test_sampled_sets_keep_the_expectation_of_all_sets():
    """K of the C(N, n) sets drawn without replacement, each rollout's sum divided by K n / N: averaged over
    many draws it approaches the all-sets advantage."""
    rewards, keys = np.array([1, 0.5, 0, 1, 0.2, 0]), list("aabbcd")
    every, _ = set_rl_advantage(rewards, [0] * 6, strategy_keys=keys, set_size=3)
    rng = np.random.default_rng(0)
    draws = [
        set_rl_advantage(rewards, [0] * 6, strategy_keys=keys, set_size=3, n_sets=8, rng=rng)[0] for _ in range(4000)
    ]
    sampled = np.mean(draws, axis=0)
    assert np.abs(sampled - every).max() < 0.01 and not np.allclose(draws[0], every)
    assert len(all_sets(6, 3)) == 20


def test_diagnostics_count_strategies_and_optimism():
    rewards, groups = [1, 1, 0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1]
    keys = ["A", "A", "A", "B", "A", "B", "C", "degenerate"]
    adv, d = set_rl_advantage(rewards, groups, strategy_keys=keys, set_size=2)
    assert d["set_rl/distinct_keys"] == 2.5  # 2 and 3 (the degenerate key is none)
    assert d["set_rl/distinct_keys_correct"] == 1.0 and d["set_rl/distinct_keys_incorrect"] == 2.0
    # by hand: group 0 gives [0, 0, -1/6, 1/6], group 1 [1/6, 0, 0, -1/6]; of the five failed rollouts only
    # the novel one of group 0 is pushed up (the zeros of group 1 are zeros up to rounding, not optimism)
    np.testing.assert_allclose(adv, [0, 0, -1 / 6, 1 / 6, 1 / 6, 0, 0, -1 / 6], atol=1e-12)
    assert d["set_rl/incorrect_positive_share"] == pytest.approx(1 / 5)


def test_grpo_div_is_grpo_on_the_reward_plus_the_novelty_bonus():
    from vpo.advantage import grpo_advantage

    rewards, keys = [1, 1, 0, 0], list("AAAB")
    novelty = np.array([1 / 3, 1 / 3, 1 / 3, 1.0])  # the share of the other three with another strategy
    adv, d = grpo_div_advantage(rewards, [0] * 4, strategy_keys=keys, diversity_weight=0.5)
    np.testing.assert_allclose(adv, grpo_advantage(np.array(rewards) + 0.5 * novelty, [0] * 4))
    assert d["grpo_div/novelty"] == pytest.approx(novelty.mean())
    degenerate, _ = grpo_div_advantage([0, 0], [0, 0], strategy_keys=["degenerate", "a"], diversity_weight=1.0)
    np.testing.assert_allclose(degenerate, grpo_advantage([0.0, 1.0], [0, 0]))  # a degenerate try has no novelty


@pytest.mark.parametrize(
    "settings, words",
    [
        ({"aggregation": "max"}, "aggregation 'max' is not one of"),
        ({"homogeneous": "either"}, "homogeneous 'either' is not one of"),
        ({"set_size": 0}, "set_size >= 1"),
        ({"n_sets": 0}, "n_sets >= 1"),
    ],
)
def test_bad_settings_are_named(settings, words):
    with pytest.raises(ValueError, match=words):
        set_rl_advantage([1, 0, 1], [0, 0, 0], strategy_keys=list("abc"), **settings)
    with pytest.raises(ValueError, match="one strategy key per rollout"):
        set_rl_advantage([1, 0, 1], [0, 0, 0], strategy_keys=list("ab"))


def test_key_codes_share_codes_and_mark_the_degenerate_key():
    assert key_codes(["a", "b", "a", "degenerate", None, "c"]).tolist() == [0, 1, 0, -1, -1, 2]


def test_sets_of_one_are_grpo_without_std_under_the_codes_rule():
    """n = 1: each set is one rollout with d = 1 (code rule), so A(y) = r(y) - mean r; the paper's rule scores
    every single-strategy set 0, so nothing moves."""
    rewards = np.array([0.9, 0.1, 0.5, 0.2])
    code, _ = set_rl_advantage(rewards, [0] * 4, strategy_keys=list("abab"), set_size=1, homogeneous="code")
    np.testing.assert_allclose(code, rewards - rewards.mean(), atol=1e-12)
    paper, d = set_rl_advantage(rewards, [0] * 4, strategy_keys=list("abab"), set_size=1)
    np.testing.assert_allclose(paper, 0.0)
    assert d["set_rl/set_diversity"] == 0.0


def test_a_seed_gives_the_same_sampled_sets_and_one_set_is_allowed():
    rewards, keys = np.array([1, 0.5, 0, 1, 0.2, 0]), list("aabbcd")
    first, _ = set_rl_advantage(rewards, [0] * 6, strategy_keys=keys, set_size=3, n_sets=4, rng=3)
    again, _ = set_rl_advantage(rewards, [0] * 6, strategy_keys=keys, set_size=3, n_sets=4, rng=3)
    other, _ = set_rl_advantage(rewards, [0] * 6, strategy_keys=keys, set_size=3, n_sets=4, rng=4)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)
    one, _ = set_rl_advantage(rewards, [0] * 6, strategy_keys=keys, set_size=3, n_sets=1, rng=0)
    np.testing.assert_allclose(one, 0.0)  # one set: its score is its own baseline


def test_skipped_groups_leave_the_others_whole_and_out_of_the_diagnostics():
    """Groups of 3 and 4 rollouts are at most n = 4 (skipped, counted), a group of 6 is computed as by brute
    force; the mean d is over the computed group's sets only, under the rule given."""
    keys = list("abc") + list("aabb") + list("abcabc")
    rewards = np.array([1, 0, 1] + [1, 1, 0, 0] + [1, 0.5, 0, 0.2, 1, 0.3])
    groups = [0] * 3 + [1] * 4 + [2] * 6
    for rule in ("paper", "code"):
        adv, d = set_rl_advantage(rewards, groups, strategy_keys=keys, set_size=4, homogeneous=rule)
        np.testing.assert_allclose(adv[:7], 0.0)
        np.testing.assert_allclose(adv[7:], brute_force(rewards[7:], keys[7:], 4, "mean", rule), atol=1e-12)
        sets = list(itertools.combinations(range(6), 4))
        distinct = [len({keys[7 + i] for i in s}) for s in sets]
        assert d["set_rl/set_diversity"] == pytest.approx(np.mean(distinct) / 4)  # no single-strategy set here
        assert d["set_rl/skipped_groups"] == 2.0
    _, nothing = set_rl_advantage([1, 0], [0, 0], strategy_keys=list("ab"), set_size=4)
    assert nothing["set_rl/set_diversity"] == 0.0 and nothing["set_rl/skipped_groups"] == 1.0


def test_the_homogeneous_rule_moves_the_mean_diversity():
    _, paper = set_rl_advantage([1, 1, 0, 0], [0] * 4, strategy_keys=list("AAAB"), set_size=2)
    _, code = set_rl_advantage([1, 1, 0, 0], [0] * 4, strategy_keys=list("AAAB"), set_size=2, homogeneous="code")
    assert paper["set_rl/set_diversity"] == pytest.approx(0.5)  # 3 of 6 pairs hold B: d = 1, the rest 0
    assert code["set_rl/set_diversity"] == pytest.approx(0.75)  # the 3 pairs A, A score 1/2


def test_a_custom_degenerate_key_counts_as_no_strategy():
    by_default, _ = set_rl_advantage([1, 0, 0, 1], [0] * 4, strategy_keys=["a", "none", "b", "c"], set_size=2)
    custom, _ = set_rl_advantage(
        [1, 0, 0, 1], [0] * 4, strategy_keys=["a", "none", "b", "c"], set_size=2, degenerate_key="none"
    )
    np.testing.assert_allclose(custom, brute_force([1, 0, 0, 1], ["a", "none", "b", "c"], 2, "mean", "paper", "none"))
    assert not np.allclose(custom, by_default)


def test_diagnostics_of_batches_without_correct_incorrect_or_any_strategy():
    _, none_solved = set_rl_advantage([0, 0, 0], [0] * 3, strategy_keys=list("abc"), set_size=2)
    assert none_solved["set_rl/distinct_keys_correct"] == 0.0 and none_solved["set_rl/distinct_keys_incorrect"] == 3
    _, all_solved = set_rl_advantage([1, 1, 1], [0] * 3, strategy_keys=list("aab"), set_size=2)
    assert all_solved["set_rl/incorrect_positive_share"] == 0.0 and all_solved["set_rl/distinct_keys_incorrect"] == 0
    _, shapeless = set_rl_advantage([1, 0, 0], [0] * 3, strategy_keys=["a", "degenerate", "degenerate"], set_size=2)
    assert shapeless["set_rl/distinct_keys_incorrect"] == 0.0 and shapeless["set_rl/distinct_keys"] == 1.0


def test_grpo_div_novelty_counts_within_each_group_only():
    """Keys repeat across groups (group 0's "a" is not group 1's); a group of one has no other rollout."""
    from vpo.set_rl import rollout_novelty

    groups = [0, 0, 0, 1, 1, 1, 1, 2]
    codes = key_codes(["a", "a", "b", "a", "b", "c", "degenerate", "a"])
    expected = [1 / 2, 1 / 2, 1, 1, 1, 1, 0, 0]  # for the others, the degenerate rollout is another key
    np.testing.assert_allclose(rollout_novelty(groups, codes), expected)
    assert key_codes([]).tolist() == [] and key_codes([]).dtype == np.int64


def test_rewards_are_clipped_to_the_unit_interval_and_the_callers_verdicts_are_used():
    """The product assumes rewards in [0, 1]: 1.5 counts as 1 and -0.5 as 0. The diagnostics read the
    caller's verdicts (the reward's `acc`, here 0/1 numbers) where given, else reward > 0."""
    keys = list("abca")
    clipped, _ = set_rl_advantage([1.5, -0.5, 0.7, 0.2], [0] * 4, strategy_keys=keys, set_size=2)
    inside, _ = set_rl_advantage([1.0, 0.0, 0.7, 0.2], [0] * 4, strategy_keys=keys, set_size=2)
    np.testing.assert_array_equal(clipped, inside)
    bonus, _ = grpo_div_advantage([1.5, -0.5, 0.7, 0.2], [0] * 4, strategy_keys=keys)
    np.testing.assert_array_equal(bonus, grpo_div_advantage([1.0, 0.0, 0.7, 0.2], [0] * 4, strategy_keys=keys)[0])
    _, given = set_rl_advantage([1.0, 0.0, 0.7, 0.2], [0] * 4, strategy_keys=keys, set_size=2, correct=[1, 0, 0, 0])
    _, by_reward = set_rl_advantage([1.0, 0.0, 0.7, 0.2], [0] * 4, strategy_keys=keys, set_size=2)
    assert given["set_rl/distinct_keys_correct"] == 1.0 and given["set_rl/distinct_keys_incorrect"] == 3.0
    assert by_reward["set_rl/distinct_keys_correct"] == 2.0 and by_reward["set_rl/distinct_keys_incorrect"] == 1.0


def test_a_group_keyed_unjudged_is_skipped_and_counted_and_the_others_are_untouched():
    """A failed judge call keys its group `unjudged` (vpo.strategy_judge): set RL gives that group 0 and counts
    it among the skipped groups; the other groups get exactly what they get alone."""
    from vpo.strategy_judge import UNJUDGED

    rewards = np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    groups = [0] * 5 + [1] * 5
    keys = [UNJUDGED] * 5 + list("abcab")
    adv, d = set_rl_advantage(rewards, groups, strategy_keys=keys, set_size=2)
    alone, d_alone = set_rl_advantage(rewards[5:], groups[5:], strategy_keys=keys[5:], set_size=2)
    assert np.all(adv[:5] == 0.0) and np.array_equal(adv[5:], alone) and np.abs(alone).max() > 0
    assert d["set_rl/skipped_groups"] == 1.0 and d_alone["set_rl/skipped_groups"] == 0.0
    assert d["set_rl/set_diversity"] == d_alone["set_rl/set_diversity"]  # the unjudged group adds no sets
    assert d["set_rl/distinct_keys"] == pytest.approx(3 / 2)  # none in the unjudged group, 3 in the other
    one, _ = set_rl_advantage(rewards, groups, strategy_keys=list("aabca") + [UNJUDGED] + list("bcab"), set_size=2)
    assert np.all(one[5:] == 0.0) and np.abs(one[:5]).max() > 0  # one unjudged rollout skips its whole group
    codes = key_codes([UNJUDGED, "a", "degenerate", "a", "b"])
    assert codes.tolist() == [-2, 0, -1, 0, 1]
