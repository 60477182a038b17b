"""lcb's DeepCoder source on tests/fixtures/deepcoder (the dataset's layout and its three test
encodings; tests/fixtures/deepcoder/build.py says what each problem is): the splits, the tests in
LiveCodeBench's encoding, grading of each encoding with hand-written programs, the hub path through
the real `datasets` parquet reader, and the settings' errors."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from vpo_tasks.lcb import LCB, LcbSettings
from vpo_tasks.lcb_deepcoder import deepcoder_tests
from vpo_tasks.lcb_sources import DroppedRecord

FIXTURE = Path(__file__).parent / "fixtures" / "deepcoder"
LOCAL = {"source": "deepcoder", "deepcoder": {"path": str(FIXTURE)}}


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    out = tmp_path_factory.mktemp("deepcoder")
    LCB.preprocess(str(out), LOCAL)
    return {name: pd.read_parquet(out / f"{name}.parquet") for name in ("train", "test")}


def truth_of(frame, task_id):
    row = frame[frame["extra_info"].map(lambda e: e["task_id"]) == task_id].iloc[0]
    return {k: (list(v) if hasattr(v, "tolist") else v) for k, v in row["reward_model"]["ground_truth"].items()}


def test_splits_follow_the_configs_in_order_and_drop_unreadable_tests(splits, capfd):
    train = [(e["task_id"], e["source"], e["testtype"]) for e in splits["train"]["extra_info"]]
    assert train == [
        ("primeintellect-train-0", "deepcoder/primeintellect", "stdin"),
        ("primeintellect-train-1", "deepcoder/primeintellect", "functional"),
        ("taco-train-0", "deepcoder/taco", "stdin"),
        ("taco-train-1", "deepcoder/taco", "functional"),
        ("lcbv5-train-0", "deepcoder/lcbv5", "stdin"),
        ("lcbv5-train-1", "deepcoder/lcbv5", "functional"),
        ("lcbv5-train-2", "deepcoder/lcbv5", "stdin"),
        ("lcbv5-train-3", "deepcoder/lcbv5", "functional"),
    ]
    test = [(e["task_id"], e["testtype"]) for e in splits["test"]["extra_info"]]
    assert test == [("lcbv5-test-0", "stdin"), ("lcbv5-test-1", "functional"), ("lcbv5-test-2", "functional")]
    assert list(splits["train"]["extra_info"].map(lambda e: e["index"])) == list(range(8))


def test_each_encoding_becomes_livecodebench_tests_smallest_first(splits):
    train, test = splits["train"], splits["test"]
    call = truth_of(train, "primeintellect-train-1")  # input ["hello big world"], output ["world big hello"]
    assert (call["fn_name"], call["inputs"], call["outputs"]) == (
        "reverse_words",
        ['"one"', '"hello big world"'],
        ['"one"', '"world big hello"'],
    )
    taco = truth_of(train, "taco-train-1")  # inputs [["banana"], ["sky"], ["queue"]], outputs [[3], [0], [4]]
    assert (taco["fn_name"], taco["inputs"], taco["outputs"]) == (
        "count_vowels",
        ['"sky"', '"queue"', '"banana"'],
        ["0", "4", "3"],
    )
    assert truth_of(train, "taco-train-0")["inputs"] == ["2\n", "0\n", "7\n"]  # same sizes: file order
    assert truth_of(test, "lcbv5-test-1")["inputs"] == ["[]\n0", "[9, 9]\n10", "[1, 4, 6]\n4"]
    assert truth_of(test, "lcbv5-test-2")["fn_name"] == "multiply"  # from the starter code: metadata has none
    prompt = test["prompt"].iloc[2][0]["content"]
    assert "def multiply(a: int, b: int) -> int:" in prompt and "self" not in prompt


PROGRAMS = {  # (split, task id, program, expected per-test results in kept order)
    "stdin_stdout": ("train", "primeintellect-train-0", "a, b = map(int, input().split())\nprint(a + b)", [1, 1]),
    "function_call": (
        "train",
        "primeintellect-train-1",
        "def reverse_words(s):\n    return ' '.join(s.split()[::-1])",
        [1, 1],
    ),
    "function_call, wrong": ("train", "primeintellect-train-1", "def reverse_words(s):\n    return s", [1, 0]),
    "taco stdin": ("train", "taco-train-0", "print(2 * int(input()))", [1, 1, 1]),
    "taco call": ("train", "taco-train-1", "def count_vowels(w):\n    return sum(c in 'aeiou' for c in w)", [1, 1, 1]),
    "lcbv5 class": (
        "test",
        "lcbv5-test-1",
        "class Solution:\n    def countAtLeast(self, nums, k):\n        return sum(x >= k for x in nums)",
        [1, 1, 1],
    ),
    "lcbv5 off by one": (
        "test",
        "lcbv5-test-1",
        "class Solution:\n    def countAtLeast(self, nums, k):\n        return sum(x > k for x in nums)",
        [1, 1, 0],
    ),
    "lcbv5 stdin": ("test", "lcbv5-test-0", "print(len(set(input())))", [1, 1, 1]),
    "lcbv5 boolean": ("train", "lcbv5-train-3", "def isPalindrome(s):\n    return s == s[::-1]", [1, 1]),
}


@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_programs_grade_against_each_encoding(splits, case):
    split, task_id, code, expected = PROGRAMS[case]
    assert LCB.score_answer(f"```python\n{code}\n```", truth_of(splits[split], task_id)) == expected


def test_the_hub_path_reads_each_config_and_split_through_datasets(tmp_path, monkeypatch):
    import datasets

    real, calls = datasets.load_dataset, []

    def hub(dataset_id, name=None, split=None, revision=None, **kwargs):
        calls.append((dataset_id, name, split, revision))
        files = [str(p) for p in sorted((FIXTURE / name).glob(f"{split}-*.parquet"))]
        return real("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "cache"))

    monkeypatch.setattr(datasets, "load_dataset", hub)
    monkeypatch.setattr("vpo_tasks.hub.hub_reachable", lambda timeout=3.0: True)
    LCB.preprocess(str(tmp_path / "hub"), {"deepcoder": {"revision": "abc123"}})
    assert calls == [
        ("agentica-org/DeepCoder-Preview-Dataset", config, split, "abc123")
        for config, split in [("primeintellect", "train"), ("taco", "train"), ("lcbv5", "train"), ("lcbv5", "test")]
    ]
    LCB.preprocess(str(tmp_path / "local"), LOCAL)
    for split in ("train", "test"):
        hub_rows = pd.read_parquet(tmp_path / "hub" / f"{split}.parquet")
        local_rows = pd.read_parquet(tmp_path / "local" / f"{split}.parquet")
        assert hub_rows.to_json() == local_rows.to_json()


def test_unreachable_hub_names_the_source_path_and_dotted_set_reaches_it(tmp_path):
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"}
    start = time.time()
    cmd = [sys.executable, "-m", "vpo.cli", "preprocess", "--task", "lcb", "--out"]
    done = subprocess.run([*cmd, str(tmp_path / "x")], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode != 0 and time.time() - start < 30
    assert "task_settings.lcb.data.deepcoder.path" in done.stderr and "--set deepcoder.path=DIR" in done.stderr
    ok = subprocess.run(
        [*cmd, str(tmp_path / "y"), "--set", f"deepcoder.path={FIXTURE}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert len(pd.read_parquet(tmp_path / "y" / "test.parquet")) == 3


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"source": "codeforces"}, "source 'codeforces' is not one of deepcoder, livecodebench"),
        ({"deepcoder": {"train": ["apps"]}}, "'apps' is not one of the dataset's configs"),
        ({"deepcoder": {"paths": "x"}}, r"lcb.deepcoder: unknown setting\(s\) \['paths'\]"),
        ({"livecodebench": {"test_from": "March"}}, "test_from must be a date"),
        # values of the wrong kind once gave Python's own words ("'int' object is not iterable")
        ({"deepcoder": {"train": 5}}, r"setting train is 5; expected a config name or a list of them"),
        ({"deepcoder": {"train": ["taco", 3]}}, r"setting train is \['taco', 3\]; expected"),
        ({"deepcoder": 7}, r"lcb.deepcoder: expected a mapping of setting names to values, got 7 \(int\)"),
        ({"livecodebench": [1]}, r"lcb.livecodebench: expected a mapping of setting names to values, got \[1\]"),
    ],
)
def test_bad_settings_name_the_key(settings, message):
    with pytest.raises(ValueError, match=message):
        LcbSettings.from_dict(settings)


def test_unreadable_encodings_are_dropped_with_a_reason():
    for raw, reason in [
        ("{not json", "unreadable tests"),
        ('{"inputs": [1], "outputs": [2]}', "unreadable tests"),
        (
            '[{"type": "stdin_stdout", "input": "1", "output": "1"}, {"testtype": "functional", '
            '"input": "1", "output": "1"}]',
            "mixed test types",
        ),
        ('[{"type": "essay"}]', "unreadable tests"),
    ]:
        with pytest.raises(DroppedRecord) as err:
            deepcoder_tests(raw)
        assert err.value.reason == reason


# ---- hostile records and short splits (one bad record once stopped the whole preprocess, naming nothing) ----
def _copy_fixture(tmp_path, edit_train=None):
    """The fixture's layout under tmp_path, lcbv5's train rows passed through edit_train(list of dicts)."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "deepcoder"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("*.py"))
    if edit_train:
        path = root / "lcbv5" / "train-00000-of-00001.parquet"
        rows = edit_train(pq.read_table(path).to_pylist())
        pq.write_table(pa.Table.from_pylist(rows), path)
    return root


def test_a_malformed_record_is_dropped_and_named_the_rest_written(tmp_path, capfd):
    def edit(rows):
        rows[0]["tests"] = "[" * 100_000 + "]" * 100_000  # JSON past the recursion limit
        return rows

    out = tmp_path / "out"
    LCB.preprocess(str(out), {"source": "deepcoder", "deepcoder": {"path": str(_copy_fixture(tmp_path, edit))}})
    err = capfd.readouterr().err
    assert "dropped 'lcbv5-train-0': malformed record (RecursionError" in err and "'malformed': 1" in err
    train = [e["task_id"] for e in pd.read_parquet(out / "train.parquet")["extra_info"]]
    assert "lcbv5-train-1" in train and "lcbv5-train-0" not in train and len(train) == 7


def test_a_bad_contest_date_is_dropped_and_a_broken_jsonl_line_named(tmp_path, capfd):
    import json

    from vpo_tasks.hub import DataUnavailable

    records = [
        json.loads(line)
        for line in (Path(__file__).parent / "fixtures" / "lcb" / "test.jsonl").read_text().splitlines()
    ]
    records[0]["contest_date"] = "the day after tomorrow"
    records[1]["starter_code"] = 7  # a number where the starter code belongs
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "test.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    LCB.preprocess(str(tmp_path / "out"), {"source": "livecodebench", "livecodebench": {"path": str(raw)}})
    err = capfd.readouterr().err
    assert f"dropped {records[0]['question_id']!r}: contest_date 'the day after tomorrow' is not a date" in err
    assert f"dropped {records[1]['question_id']!r}: starter_code is a int, not text" in err
    (raw / "test.jsonl").write_text(json.dumps(records[1]) + "\n{not json\n")
    with pytest.raises(DataUnavailable, match=rf"{raw / 'test.jsonl'}:2 is not JSON"):
        LCB.preprocess(str(tmp_path / "out2"), {"source": "livecodebench", "livecodebench": {"path": str(raw)}})


def test_a_folder_named_parquet_and_a_file_without_the_columns_are_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vpo_tasks.hub import DataUnavailable

    root = _copy_fixture(tmp_path)
    for f in (root / "taco").glob("*.parquet"):
        f.unlink()
    (root / "taco" / "train-00000-of-00001.parquet").mkdir()
    with pytest.raises(DataUnavailable, match="holds no taco/train"):
        LCB.preprocess(str(tmp_path / "out"), {"source": "deepcoder", "deepcoder": {"path": str(root)}})
    (root / "taco" / "train-00000-of-00001.parquet").rmdir()
    pq.write_table(
        pa.Table.from_pylist([{"question": "q", "answers": "[]"}]), root / "taco" / "train-00000-of-00001.parquet"
    )
    with pytest.raises(DataUnavailable, match="has no column problem, tests"):
        LCB.preprocess(str(tmp_path / "out"), {"source": "deepcoder", "deepcoder": {"path": str(root)}})


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"max_test_chars": -1}, "max_test_chars must be at least 1"),
        ({"train_size": 0}, "train_size must be at least 1"),
        ({"train_size": -1}, "train_size must be at least 1"),
    ],
)
def test_sizes_that_would_write_an_empty_or_short_split_are_refused(tmp_path, extra, message):
    with pytest.raises(ValueError, match=message):
        LCB.preprocess(str(tmp_path / "out"), {**LOCAL, **extra})
    assert not (tmp_path / "out" / "train.parquet").exists()


def test_vpo_preprocess_refuses_a_split_shorter_than_asked(tmp_path):
    """The fixture holds 8 training problems; 50 asked once gave 8 and rc 0."""
    from vpo.cli import main

    with pytest.raises(SystemExit, match=r"train.parquet holds 8 rows; task_settings.lcb.data.train_size asks for 50"):
        main(
            [
                "preprocess",
                "--task",
                "lcb",
                "--out",
                str(tmp_path / "out"),
                "--set",
                "source=deepcoder",
                "--set",
                f"deepcoder.path={FIXTURE}",
                "--set",
                "train_size=50",
            ]
        )
    assert not list((tmp_path / "out").glob("*.parquet"))


def test_vpo_preprocess_refuses_an_empty_split_naming_the_settings(tmp_path, capsys):
    """Every test over the size cap: each problem dropped, both splits empty; rc 0 once."""
    from vpo.cli import main

    with pytest.raises(SystemExit, match=r"train.parquet is empty: .*task_settings.lcb.data"):
        main(
            [
                "preprocess",
                "--task",
                "lcb",
                "--out",
                str(tmp_path / "out"),
                "--set",
                "source=deepcoder",
                "--set",
                f"deepcoder.path={FIXTURE}",
                "--set",
                "max_test_chars=1",
            ]
        )
    assert not list((tmp_path / "out").glob("*.parquet"))


def read_split(out, split):
    from vpo.data import read_rows
    from vpo.preprocess import parquet_rows

    return read_rows(out, split) if parquet_rows(out / f"{split}.parquet") else []


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda r: r.update(difficulty=3), "info.difficulty is a int, not text"),
        (lambda r: r.update(platform=["leetcode"]), "info.platform is a list, not text"),
        (lambda r: r.update(metadata={"func_name": 5}), "fn_name is a int, not text"),
        (lambda r: r.update(private_test_cases='[{"input": "1", "output": "1", "testtype": 7}]'), "testtype is a int"),
    ],
)
def test_a_field_of_the_wrong_type_drops_and_names_its_record(tmp_path, capfd, edit, words):
    """One record with a value of the wrong type once stopped the whole preprocess with a pyarrow error
    naming no record, and left train.parquet behind."""
    import json

    from vpo.cli import main

    records = [
        json.loads(line)
        for line in (Path(__file__).parent / "fixtures" / "lcb" / "test.jsonl").read_text().splitlines()
    ]
    edit(records[0])
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "test.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    out = tmp_path / "out"
    LCB.preprocess(str(out), {"source": "livecodebench", "livecodebench": {"path": str(raw)}})
    err = capfd.readouterr().err
    assert f"dropped {records[0]['question_id']!r}: {words}" in err and "'malformed': 1" in err
    written = [row["extra_info"]["task_id"] for split in ("train", "test") for row in read_split(out, split)]
    assert records[0]["question_id"] not in written and records[1]["question_id"] in written
    # a failed preprocess leaves neither split (here: every record is a test problem, train is empty)
    args = ["preprocess", "--task", "lcb", "--out", str(out), "--set", "source=livecodebench"]
    with pytest.raises(SystemExit, match="train.parquet is empty"):
        main([*args, "--set", f"livecodebench.path={raw}"])
    assert not (out / "train.parquet").exists() and not (out / "test.parquet").exists()


def test_a_preprocess_that_raises_leaves_no_split(tmp_path, monkeypatch):
    """The task wrote train.parquet and then failed: neither split stays."""
    from vpo.cli import main
    from vpo.task import resolve
    from vpo.atomic import write_parquet_atomic

    task = resolve("lcb")

    def half(out_dir, settings=None):
        write_parquet_atomic([{"data_source": "lcb"}], Path(out_dir) / "train.parquet")
        raise ValueError("the test split's source is gone")

    monkeypatch.setattr(task, "preprocess", half)
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match="the test split's source is gone"):
        main(["preprocess", "--task", "lcb", "--out", str(out)])
    assert not (out / "train.parquet").exists()
