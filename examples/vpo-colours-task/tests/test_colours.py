"""The colours task's own tests: the scorer against vectors written by hand, the answer parsers on
missing, repeated and out-of-order answers, arbitrary text never raising, and the rows preprocess
writes (the pipeline's own checks: `vpo.preprocess.row_problem`)."""

import random
import string

import pytest

from vpo.data import read_rows
from vpo.task import resolve

GT = {"colours": ["red", "blue", "green"]}


@pytest.fixture(scope="module")
def task():
    return resolve("colours")  # found through the entry point of the installed package


def test_the_scorer_counts_the_problems_colours_in_answers_of_at_most_two(task):
    assert task.score_answer("<answer>red blue</answer>", GT) == [1.0, 1.0, 0.0]
    assert task.score_answer("Blue and PINK", GT) == [0.0, 1.0, 0.0]  # a slot's text, no tags
    assert task.score_answer("red blue green", GT) == [0.0, 0.0, 0.0]  # three colours break the rule
    assert task.score_answer("red red", GT) == [1.0, 0.0, 0.0]  # a colour counts once
    assert task.score_answer("", GT) == task.score_answer("<answer></answer>", GT) == [0.0, 0.0, 0.0]
    assert task.is_correct([1.0, 0.0, 1.0]) and not task.is_correct([0.0, 1.0, 0.0])


def test_answers_are_read_from_their_slots(task):
    text = "<answer_2>green</answer_2> <answer_1>red</answer_1> <answer_3>red</answer_3>"
    assert task.answer_slots(text, 3) == ["red", "green", "red"]  # in slot order, repeats kept
    assert task.split_answers(text, 3) == ["red", "green"]  # distinct, in order
    assert task.answer_slots("<answer_1>red</answer_1>", 3) == ["red", "", ""]
    assert task.split_answers("no tags", 1) == [] and not task.parses("no tags")


def test_arbitrary_text_never_makes_the_scorer_raise(task):
    rng = random.Random(0)
    for _ in range(500):
        text = "".join(rng.choice(string.printable + "<>_/") for _ in range(rng.randint(0, 80)))
        vector = task.score_answer(text, GT)
        assert len(vector) == 3 and all(v in (0.0, 1.0) for v in vector)


def test_preprocess_writes_rows_every_method_can_use(task, tmp_path):
    from vpo.preprocess import row_problem

    train, test = task.preprocess(str(tmp_path), {"train_size": 5, "test_size": 2, "seed": 1})
    rows = read_rows(str(tmp_path), "train")
    assert len(rows) == 5 and len(read_rows(str(tmp_path), "test")) == 2
    assert row_problem(task, rows) is None
    with pytest.raises(ValueError, match="unknown setting"):
        task.settings_class.from_dict({"train_sise": 5})
