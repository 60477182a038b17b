"""`vpo preprocess`: write a task's train.parquet and test.parquet in veRL's row schema.

    vpo preprocess --task maze --out results/cpu/data/maze
    vpo preprocess --task maze --out results/cpu/data/maze --train-size 256 --test-size 24 --score-mode linear
    vpo preprocess --task maze --out results/cpu/data/maze --config config.yaml --preset cpu

Settings come from, in increasing priority: the task's defaults (the paper's), the config's
`task_settings.<task>.data` when --config is given, then the flags below
and any `--set key=value`. The task checks every setting before generating anything. With
--config, the task's prompt templates (`task_settings.<task>.prompts`, `vpo.templates`) are read
and checked first and applied to the rows written.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from vpo.atomic import write_parquet_atomic
from vpo.config import deep_merge, load_config, task_settings
from vpo.data import read_rows
from vpo.prompts import row_prompt
from vpo.task import resolve, task_code
from vpo.templates import apply_templates, read_templates

# flag dest -> setting name understood by the tasks that take it (maze: all of these)
_FLAG_SETTINGS = {
    "train_size": "train_size",
    "test_size": "test_size",
    "train_seed": "train_seed",
    "test_seed": "test_seed",
    "score_mode": "score_mode",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="task name, e.g. maze")
    parser.add_argument("--out", required=True, help="output directory for train.parquet and test.parquet")
    parser.add_argument(
        "--config",
        default=None,
        help="config.yaml to read task_settings.<task>.data from (default: only the task's defaults and the flags)",
    )
    parser.add_argument("--preset", default=None, help="preset of --config to apply (default: the file's own)")
    parser.add_argument("--train-size", type=int, default=None, help="training rows (maze default 1000)")
    parser.add_argument("--test-size", type=int, default=None, help="test rows (maze default 100)")
    parser.add_argument("--train-seed", type=int, default=None, help="base seed of the training split (maze 42)")
    parser.add_argument("--test-seed", type=int, default=None, help="base seed of the test split (maze 4242)")
    parser.add_argument(
        "--score-mode",
        default=None,
        choices=["convex_bonus", "linear"],
        help="maze reward mode written into every row (default convex_bonus)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other task setting (value parsed as JSON when it parses, else text)",
    )


def _not_finite(value: Any) -> bool:
    """Whether a parsed value holds NaN or an infinity, at any depth."""
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return any(_not_finite(v) for v in value.values())
    return isinstance(value, list) and any(_not_finite(v) for v in value)


def _parse_set(items: list[str]) -> dict[str, Any]:
    """{key: value} of `--set key=value` items; a dotted key (`deepcoder.path=DIR`) sets a nested one."""
    settings: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or "" in key.split("."):
            raise SystemExit(f"vpo preprocess: --set expects KEY=VALUE (KEY may be dotted), got {item!r}")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        if _not_finite(parsed):  # json reads NaN and Infinity; no setting means them
            raise SystemExit(f"vpo preprocess: --set {key}={value}: {value} is not a finite number")
        *parents, leaf = key.split(".")
        node = settings
        for name in parents:
            node = node.setdefault(name, {})
            if not isinstance(node, dict):
                raise SystemExit(f"vpo preprocess: --set {key}: {name} is set to a value and a mapping at once")
        node[leaf] = parsed
    return settings


def _task_block(args: argparse.Namespace) -> dict[str, Any]:
    """task_settings.<task> of --config, read once ({} without one)."""
    if not args.config:
        return {}

    return task_settings(load_config(args.config, args.preset), args.task)


def _settings_from_args(args: argparse.Namespace, block: dict[str, Any]) -> dict[str, Any]:
    """The task's data settings: the config's task block (if any) < flags < --set."""
    settings: dict[str, Any] = dict(block.get("data") or {})
    for dest, name in _FLAG_SETTINGS.items():
        if getattr(args, dest, None) is not None:
            settings[name] = getattr(args, dest)
    return deep_merge(settings, _parse_set(args.set))


def row_problem(task, rows: list[dict]) -> str | None:
    """What the first row the methods cannot use lacks, or None: each row's data_source must name the
    task (the reward routes on it), and its prompt must carry the single-answer format the task's
    multi-answer rewrite replaces (`Task.multi_rewrites`: without it multi-answer methods fail when
    they train)."""
    for i, row in enumerate(rows):
        try:
            if resolve(str(row.get("data_source"))) is not task:
                return f"row {i}: data_source {row.get('data_source')!r} does not name task {task.name!r}"
            row_prompt(row, mode="multi", m=task.default_m, task=task)
        except NotImplementedError:
            return (
                f"row {i}: task {task.name!r} has no multi-answer format (`Task.multi_format`), which "
                "multi-answer methods need (docs/extending.md)"
            )
        except ValueError as err:
            return (
                f"row {i}: {err}; a task's preprocess writes its `single_format_line` into every prompt, "
                "word for word (docs/extending.md)"
            )
    return None


def parquet_rows(path: str | Path) -> int:
    """The number of rows a parquet file says it holds."""
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows


def split_problem(task, split: str, rows: list[dict], settings: dict[str, Any]) -> str | None:
    """What is wrong with a split's size, or None: an empty split, or fewer rows than a size setting
    asks for (wrong columns, a bad filter or a cap once gave empty or short splits that looked complete)."""
    where = f"task_settings.{task.name}.data"
    if not rows:
        return f"is empty: the data gave no usable {split} row; check {where} (the log names what was dropped)"
    name, asked = task.split_sizes(settings).get(split, (None, 0))
    if len(rows) < asked:
        return f"holds {len(rows)} rows; {where}.{name} asks for {asked} (the data has no more)"
    return None


def run(args: argparse.Namespace) -> int:
    try:
        task = resolve(args.task)
    except ValueError as err:
        raise SystemExit(f"vpo preprocess: {err}") from None
    start = time.perf_counter()
    try:
        block = _task_block(args)
        settings = _settings_from_args(args, block)
        # a relative template path names a file of the project, the directory config.yaml is in
        templates = read_templates(task, block.get("prompts"), Path(args.config).parent if args.config else None)
        # ValueError and OSError: the task's own messages about its settings and data files
        try:
            with task_code(task, "preprocessing", passes=(ValueError, OSError)):
                train_path, test_path = task.preprocess(args.out, settings)
        except BaseException:
            for split in ("train", "test"):  # never one split of a failed preprocess beside an old other
                (Path(args.out) / f"{split}.parquet").unlink(missing_ok=True)
            raise
        for split, path in (("train", train_path), ("test", test_path)):
            rows = read_rows(args.out, split) if parquet_rows(path) else []
            if templates and rows:
                rows = apply_templates(task, rows, templates)
                write_parquet_atomic(rows, path)
            problem = split_problem(task, split, rows, settings) or row_problem(task, rows)
            if problem:
                for written in (train_path, test_path):
                    Path(written).unlink(missing_ok=True)  # no file that looks complete
                raise ValueError(f"{split}.parquet {problem}")
    except ValueError as err:
        raise SystemExit(f"vpo preprocess --task {task.name}: {err}") from None
    print(
        f"wrote {train_path} and {test_path} in {time.perf_counter() - start:.1f} s "
        f"(settings: {json.dumps(settings, sort_keys=True)})"
    )
    return 0
