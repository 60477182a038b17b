"""Reading rollouts: reward matrices from every form the trainers hand over, group numbering by first
appearance, and the group/slot layout, against hand-written cases."""

from __future__ import annotations

import numpy as np
import pytest

from vpo.rollouts import as_matrix, group_codes, group_slots


def test_a_float64_matrix_is_used_as_it_is():
    mat = np.array([[1.0, 0.0], [0.5, 0.5]])
    assert as_matrix(mat) is mat


@pytest.mark.parametrize(
    "item",
    [
        [[1, 0], [0.5, 0.5]],
        "[[1, 0], [0.5, 0.5]]",
        b"[[1, 0], [0.5, 0.5]]",
        np.array([[1, 0], [0.5, 0.5]], dtype=np.float32),
        ((1, 0), (0.5, 0.5)),
    ],
)
def test_every_form_of_a_matrix_reads_the_same(item):
    got = as_matrix(item)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, [[1.0, 0.0], [0.5, 0.5]])


def test_integer_arrays_become_float64():
    got = as_matrix(np.array([[1, 0, 1]]))
    assert got.dtype == np.float64 and got.tolist() == [[1.0, 0.0, 1.0]]


def test_a_vector_is_one_answer():
    np.testing.assert_array_equal(as_matrix([0.2, 0.4, 1.0]), [[0.2, 0.4, 1.0]])
    np.testing.assert_array_equal(as_matrix(np.array([0.2, 0.4])), [[0.2, 0.4]])
    np.testing.assert_array_equal(as_matrix("[0.2, 0.4]"), [[0.2, 0.4]])


@pytest.mark.parametrize("item", [None, "", "   ", b"", "null", [], "[]", [[]], np.zeros((0, 3)), np.zeros((2, 0))])
def test_no_answer_is_a_zero_by_zero_matrix(item):
    got = as_matrix(item)
    assert got.shape == (0, 0) and got.dtype == np.float64


def test_a_matrix_of_three_dimensions_is_refused():
    with pytest.raises(ValueError, match=r"sub_scores must be an \(m, k\) matrix, got shape \(1, 1, 2\)"):
        as_matrix("[[[0.5, 0.5]]]")


@pytest.mark.parametrize(
    "ids",
    [
        ["b", "a", "b", "c", "a"],
        np.array(["b", "a", "b", "c", "a"]),
        np.array([7, 3, 7, 1, 3]),
        [7, 3, 7, 1, 3],
        np.array([("x", 1), 2, ("x", 1), "c", 2], dtype=object),
    ],
)
def test_groups_are_numbered_by_first_appearance(ids):
    if isinstance(ids, np.ndarray) and ids.dtype == object:
        ids[0] = ids[2] = ("x", 1)  # numpy splits tuples into a 2-d array; keep them as objects
    codes, n = group_codes(ids)
    assert n == 3 and codes.dtype == np.int64
    assert codes.tolist() == [0, 1, 0, 2, 1]


def test_no_rollouts_no_groups():
    codes, n = group_codes([])
    assert n == 0 and codes.shape == (0,)
    codes, n = group_codes(np.array([], dtype=np.int64))
    assert n == 0 and codes.shape == (0,)


def test_group_slots_lays_out_chosen_groups_in_batch_order():
    codes = np.array([0, 1, 0, 2, 1, 0])
    rsel, lg, slot, count = group_slots(codes, 3, np.array([2, 0]))
    # groups 2 and 0 (positions 0 and 1 of gsel): rollouts 0, 2, 5 of group 0 and rollout 3 of group 2
    assert rsel.tolist() == [0, 2, 3, 5]
    assert lg.tolist() == [1, 1, 0, 1]
    assert slot.tolist() == [0, 1, 0, 2]
    assert count.tolist() == [1, 3]


def test_group_slots_of_every_group_and_of_none():
    codes = np.array([1, 1, 0, 1, 0])
    rsel, lg, slot, count = group_slots(codes, 2, np.array([0, 1]))
    assert rsel.tolist() == [0, 1, 2, 3, 4] and lg.tolist() == [1, 1, 0, 1, 0]
    assert slot.tolist() == [0, 1, 0, 2, 1] and count.tolist() == [2, 3]
    rsel, lg, slot, count = group_slots(codes, 2, np.array([], dtype=np.int64))
    assert rsel.size == lg.size == slot.size == count.size == 0


def test_group_slots_keeps_batch_order_in_large_groups_and_counts_empty_groups():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 3, size=200)  # 3 groups interleaved over 200 rollouts
    rsel, lg, slot, count = group_slots(codes, 4, np.array([2, 0, 3]))  # group 3 has no rollouts
    assert slot.dtype == np.int64 and count.tolist() == [int((codes == 2).sum()), int((codes == 0).sum()), 0]
    for position, group in enumerate([2, 0]):
        mine = rsel[lg == position]
        np.testing.assert_array_equal(mine, np.flatnonzero(codes == group))  # the group's rollouts in batch order
        np.testing.assert_array_equal(slot[lg == position], np.arange(len(mine)))  # slot = rank in batch order
