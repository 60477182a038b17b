"""Search metrics against enumeration, combinatorial formulas and hand-computed values."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpo.metrics import (
    advantage_summary,
    best_at_k,
    best_at_k_curve,
    best_at_k_permutation_curve,
    diversity,
    expected_best_of_m,
    group_pool_diversity,
    group_strategies,
    hypervolume,
    nondominated_distinct,
    pass_at_k,
    pass_at_k_curve,
)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 25), data=st.data())
def test_pass_at_k_equals_combinatorial_formula(n, data):
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    expected = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_edges():
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(5, 1, 1) == pytest.approx(0.2)
    assert pass_at_k(4, 1, 9) == 1.0  # k > n: the whole pool
    assert pass_at_k(4, 1, 5) == 1.0
    assert pass_at_k(4, 0, 9) == 0.0
    assert pass_at_k(0, 0, 1) == 0.0  # empty pool
    assert pass_at_k_curve(4, 2, 3) == pytest.approx([0.5, 1 - 1 / 6, 1.0])
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 0)


def enumerate_best_at_k(scores, k):
    subsets = list(combinations(scores, k))
    return sum(max(s) for s in subsets) / len(subsets)


@settings(max_examples=150, deadline=None)
@given(scores=st.lists(st.floats(-3, 3, allow_nan=False), min_size=1, max_size=9), data=st.data())
def test_best_at_k_equals_subset_enumeration(scores, data):
    k = data.draw(st.integers(1, len(scores)))
    assert best_at_k(scores, k) == pytest.approx(enumerate_best_at_k(scores, k), abs=1e-9)


def test_best_at_k_reads_a_column_of_scores():
    # scores as a one-column frame hands them over, (n, 1): the pool is the column
    assert best_at_k([[0.1], [0.9], [0.5]], 2) == pytest.approx(best_at_k([0.1, 0.9, 0.5], 2))
    assert best_at_k_curve([[0.1], [0.9], [0.5]], 3)[-1] == 0.9


def test_best_at_k_hand_numbers_and_edges():
    # {0, 0.5, 1}, k = 2: subsets max 0.5, 1, 1 -> 2.5 / 3
    assert best_at_k([1.0, 0.0, 0.5], 2) == pytest.approx(2.5 / 3)
    assert best_at_k([1.0, 0.0, 0.5], 1) == pytest.approx(0.5)  # the mean
    assert best_at_k([1.0, 0.0, 0.5], 7) == 1.0  # k > n: the pool max
    assert best_at_k([], 3) == 0.0
    assert best_at_k_curve([1.0, 0.0, 0.5], 4) == pytest.approx([0.5, 2.5 / 3, 1.0, 1.0])
    # large pools stay finite and exact enough: 30 candidates, k = 15
    r = np.linspace(0, 1, 30)
    assert best_at_k(r, 15) == pytest.approx(enumerate_best_at_k_sorted_formula(r, 15), rel=1e-12)
    with pytest.raises(ValueError, match="NaN"):
        best_at_k([0.1, float("nan")], 1)


def enumerate_best_at_k_sorted_formula(r, k):
    r = sorted(r)
    n = len(r)
    return sum(math.comb(i - 1, k - 1) * r[i - 1] for i in range(k, n + 1)) / math.comb(n, k)


def test_best_at_k_permutation():
    scores = [0.1, 0.9, 0.4, 0.3]
    curve = best_at_k_permutation_curve(scores, 6, rng=0)
    perm = np.random.default_rng(0).permutation(4)
    running = np.maximum.accumulate(np.array(scores)[perm])
    assert curve == pytest.approx(list(running) + [0.9, 0.9])
    assert best_at_k_permutation_curve([], 3) == [0.0, 0.0, 0.0]
    # averaged over many permutations it converges to the exact estimator
    mean = np.mean([best_at_k_permutation_curve(scores, 2, rng=s)[1] for s in range(4000)])
    assert mean == pytest.approx(best_at_k(scores, 2), abs=0.01)


def test_expected_best_of_m_hand_numbers():
    pool = [[1.0, 0.0], [0.0, 1.0], [0.4, 0.4]]
    w = [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]
    # per weight: max(1, 0, .4)=1; max(.5, .5, .4)=.5; max(0, 1, .4)=1 -> 2.5/3
    assert expected_best_of_m(pool, w) == pytest.approx(2.5 / 3)
    assert expected_best_of_m([0.2, 0.6], w) == pytest.approx((0.2 + 0.4 + 0.6) / 3)  # pool of one
    assert expected_best_of_m([], w) == 0.0
    with pytest.raises(ValueError, match=r"\(W, 2\)"):
        expected_best_of_m(pool, [[1.0, 0.0, 0.0]])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.floats(0, 1), min_size=3, max_size=3), min_size=0, max_size=8))
def test_diversity_equals_pairwise_loop(vectors):
    n = len(vectors)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    expected = (
        sum(sum(abs(a - b) for a, b in zip(vectors[i], vectors[j])) for i, j in pairs) / len(pairs) if pairs else 0.0
    )
    assert diversity(vectors) == pytest.approx(expected, abs=1e-12)


def test_diversity_hand_numbers():
    # three vectors: d(a,b)=2, d(a,c)=1, d(b,c)=1 -> 4/3
    assert diversity([[1, 0], [0, 1], [0.5, 0.5]]) == pytest.approx(4 / 3)
    assert diversity([[1, 0]]) == 0.0
    assert diversity([]) == 0.0


def test_group_pool_diversity():
    subs = [[[1, 0]], [[0, 1], [1, 0]], None, [[0.5, 0.5, 0.5]], "[[0.5, 0.5, 0.5]]"]
    ids = ["a", "a", "a", "b", "b"]
    # group a pool: (1,0), (0,1), (1,0): distances 2, 0, 2 -> 4/3; group b: identical -> 0
    assert group_pool_diversity(subs, ids) == pytest.approx((4 / 3 + 0) / 2)
    assert group_pool_diversity([], []) == 0.0
    # a group whose answers all failed to parse has no pool: diversity 0
    assert group_pool_diversity([None, "", [[1, 0], [0, 1]]], ["a", "a", "b"]) == pytest.approx((0 + 2) / 2)


def test_hypervolume_of_a_small_front_by_hand():
    # boxes [0,0.5]x[0,0.5] (0.25) and [0,1]x[0,0.2] (0.2) overlap in [0,0.5]x[0,0.2] (0.1): 0.35;
    # a duplicate and a dominated point add nothing
    assert hypervolume([[0.5, 0.5], [1.0, 0.2], [0.5, 0.5], [0.2, 0.2]]) == pytest.approx(0.35)
    # 3-d: 1*1*0.5 + 0.5*0.5*1 - overlap 0.5*0.5*0.5
    assert hypervolume([[1, 1, 0.5], [0.5, 0.5, 1]]) == pytest.approx(0.625)
    # a zero coordinate spans no volume; an empty pool has none
    assert hypervolume([[0.0, 1.0], [0.4, 0.5]]) == pytest.approx(0.2)
    assert hypervolume(np.zeros((0, 3))) == 0.0


def test_a_reference_below_zero_counts_vectors_with_a_zero_objective():
    # maze-like trade-off: gold or diamond, never both. Against 0 nothing; against -0.1 the two boxes
    # [-0.1, 1] x [-0.1, 0] and [-0.1, 0] x [-0.1, 1] (0.11 each) share [-0.1, 0]^2 (0.01)
    assert hypervolume([[1, 0], [0, 1]]) == 0.0
    assert hypervolume([[1, 0], [0, 1]], reference=-0.1) == pytest.approx(0.21)


def test_hypervolume_of_pass_fail_objectives_is_whether_one_candidate_passes_all():
    fails = np.ones((5, 16))
    fails[np.arange(5), np.arange(5)] = 0  # each candidate fails one test
    assert hypervolume(fails) == 0.0
    assert hypervolume(np.vstack([fails, np.ones(16)])) == 1.0


def test_nondominated_distinct_counts_each_vector_once():
    front = nondominated_distinct([[1, 0], [1, 0], [0, 1], [0.5, 0.5], [0.2, 0.2], [0, 1]])
    assert sorted(map(tuple, front.tolist())) == [(0, 1), (0.5, 0.5), (1, 0)]


def test_nondominated_distinct_order_shapes_and_errors():
    front = nondominated_distinct([[0, 1], [1, 0], [0.5, 0.5], [0.5, 0.4], [1, 0]])
    np.testing.assert_array_equal(front, [[0, 1], [0.5, 0.5], [1, 0]])  # lexicographic rows
    assert nondominated_distinct(np.zeros((0, 3))).shape == (0, 3)
    assert nondominated_distinct([[1, 0], [0, 1]]).dtype == np.float64  # integer rewards come back as floats
    np.testing.assert_array_equal(nondominated_distinct([[0.3, 0.3], [0.3, 0.3]]), [[0.3, 0.3]])
    with pytest.raises(ValueError, match=r"must be \(n, k\), got shape \(3,\)"):
        nondominated_distinct([0.1, 0.2, 0.3])


def test_hypervolume_in_many_dimensions():
    # 9 objectives: above the exact limit a front of several continuous vectors is approximated, one box
    # and pass/fail vectors (only the all-ones vector spans volume) stay exact
    assert hypervolume([np.full(9, 0.5), np.full(9, 0.25)]) == pytest.approx(0.5**9, rel=1e-12)
    eight = np.array([np.r_[1.0, np.full(7, 0.5)], np.r_[0.5, 1.0, np.full(6, 0.5)]])  # 8: exact
    assert hypervolume(eight) == pytest.approx(2 * 0.5**7 - 0.5**8, rel=1e-12)
    two = np.array([np.r_[1.0, np.full(8, 0.5)], np.r_[0.5, 1.0, np.full(7, 0.5)]])
    assert hypervolume(two) == pytest.approx(2 * 0.5**8 - 0.5**9, rel=0.05)
    binary = np.ones((1, 9))
    assert hypervolume(binary) == 1.0
    assert hypervolume(np.vstack([binary, np.zeros((1, 9))]), reference=0.0) == 1.0
    # a reference below 0 with pass/fail vectors: one box [-0.5, 1]^2 = 2.25 exactly
    assert hypervolume([[1.0, 1.0], [0.0, 1.0]], reference=-0.5) == pytest.approx(2.25)


def test_bad_inputs_name_the_problem():
    for bad in (0, 1.5, -2):
        with pytest.raises(ValueError, match=f"k \\(number of candidates\\) must be a positive integer, got {bad}"):
            best_at_k([0.5], bad)
    with pytest.raises(ValueError, match="^scores contain NaN or inf; score unparseable candidates as 0"):
        best_at_k_curve([0.1, float("inf")], 2)
    with pytest.raises(ValueError, match="^scores contain NaN or inf"):
        best_at_k([0.1, None], 1)  # a missing score, as pandas hands it over
    for n, c in ((2.5, 1), (3, 1.5), (-1, 0), (3, -1)):
        with pytest.raises(ValueError, match=f"integers 0 <= c <= n, got n={n}, c={c}"):
            pass_at_k(n, c, 1)
    with pytest.raises(ValueError, match="positive integer"):
        pass_at_k_curve(3, 1, 0)
    with pytest.raises(ValueError, match=r"\(m, k\), got shape \(1, 2, 2\)"):
        expected_best_of_m([[[0.1, 0.2], [0.3, 0.4]]], [[1.0, 0.0]])
    with pytest.raises(ValueError, match=r"weights must be \(W, 2\) to match the pool's k, got \(2,\)"):
        expected_best_of_m([[0.1, 0.2]], [1.0, 0.0])
    with pytest.raises(ValueError, match=r"diversity needs reward vectors \(n, k\), got shape \(3,\)"):
        diversity([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="sub_scores has 2 entries but group_ids has 1"):
        group_pool_diversity([[[1, 0]], [[0, 1]]], ["a"])


def test_advantage_summary_thresholds_and_edges():
    # a group moves when one advantage passes 1e-6; a rollout counts as zero within 1e-12 only
    tiny = advantage_summary([2e-6, 0.0, 5e-7, 0.0, 1e-13], ["a", "a", "b", "b", "c"])
    assert tiny["advantage/zero_group_frac"] == pytest.approx(2 / 3) and tiny["advantage/zero_frac"] == 0.6
    assert tiny["advantage/max"] == 2e-6 and tiny["advantage/min"] == 0.0
    # at the thresholds themselves: 1e-6 does not move a group, 1e-12 is not zero
    edge = advantage_summary([1e-6, 0.0, 1e-12], ["a", "a", "b"])
    assert edge["advantage/zero_group_frac"] == 1.0 and edge["advantage/zero_frac"] == pytest.approx(1 / 3)
    # one rollout: its magnitude, sign kept in the extremes; population std of one value is 0
    one = advantage_summary([-3.0], [0])
    assert (one["advantage/abs_max"], one["advantage/min"], one["advantage/max"], one["advantage/std"]) == (
        3.0, -3.0, -3.0, 0.0
    )  # fmt: skip
    assert one["advantage/mean"] == -3.0 and one["advantage/zero_group_frac"] == 0.0
    # two rollouts: population std (ddof 0), mean over rollouts not groups
    two = advantage_summary([1.0, -3.0, 0.0], ["a", "a", "b"])
    assert two["advantage/mean"] == pytest.approx(-2 / 3)
    assert two["advantage/std"] == pytest.approx(np.sqrt(((1 + 2 / 3) ** 2 + (3 - 2 / 3) ** 2 + (2 / 3) ** 2) / 3))
    assert two["advantage/zero_group_frac"] == 0.5 and two["advantage/zero_frac"] == pytest.approx(1 / 3)
    empty = advantage_summary([], [])
    assert empty == dict.fromkeys(
        [f"advantage/{k}" for k in ("mean", "std", "abs_max", "zero_group_frac", "max", "min", "zero_frac")], 0.0
    )
    with pytest.raises(ValueError, match="^advantages has 2 entries but group_ids has 1$"):
        advantage_summary([0.0, 1.0], [0])


def test_group_strategies_counts_the_distinct_real_keys_per_group():
    from vpo.strategy_judge import UNJUDGED

    # group a: keys x, y, x -> 2; group b: only the degenerate key and None -> 0; group c: z and an
    # unjudged key (a failed judge call) -> 1; mean over the three groups, whatever their sizes
    keys = ["x", "y", "x", "degenerate", None, "z", UNJUDGED]
    ids = ["a", "a", "a", "b", "b", "c", "c"]
    assert group_strategies(keys, ids) == pytest.approx((2 + 0 + 1) / 3)
    assert group_strategies(["d", "d"], [0, 1], degenerate="d") == 0.0  # another name for the degenerate key
    assert group_strategies(["degenerate", "q"], [0, 0], degenerate="d") == 2.0
    assert group_strategies([], []) == 0.0
    with pytest.raises(ValueError, match="^keys has 1 entries but group_ids has 2$"):
        group_strategies(["x"], [0, 1])
