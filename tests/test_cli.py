"""The `vpo` command: every subcommand's module exists, parses its arguments and runs."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from vpo.cli import COMMANDS, build_parser

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_module_defines_its_parser_and_runner(name):
    module = importlib.import_module(COMMANDS[name][0])
    assert callable(module.add_arguments) and callable(module.run)
    with pytest.raises(SystemExit) as exit_info:  # --help parses and exits 0
        build_parser(name).parse_args([name, "--help"])
    assert exit_info.value.code == 0


def test_unknown_subcommand_is_refused_with_the_known_ones():
    proc = subprocess.run([sys.executable, "-m", "vpo.cli", "evolution"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "invalid choice: 'evolution'" in proc.stderr and "preprocess" in proc.stderr


def test_help_lists_subcommands_without_importing_torch():
    code = (
        "import sys; from vpo.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "preprocess" in proc.stdout and proc.stdout.strip().endswith("False")


def test_a_stage_error_is_one_line_and_a_nonzero_exit(tmp_path):
    """A damaged or empty split read by `vpo train`: one line naming the file and the command that
    rebuilds it, exit status 1; VPO_DEBUG=1 gives the traceback."""
    import os
    import subprocess
    import sys

    import pandas as pd

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"PAR1 this is not parquet")
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    argv = [
        sys.executable,
        "-m",
        "vpo.cli",
        "train",
        "--backend",
        "local",
        "--task",
        "maze",
        "--method",
        "grpo",
        "--seed",
        "0",
        "--data",
        str(data),
        "--base-model",
        str(base),
        "--out",
        str(tmp_path / "run"),
    ]
    env = {k: v for k, v in os.environ.items() if k != "VPO_DEBUG"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    lines = [line for line in done.stderr.splitlines() if line.startswith("vpo ")]
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr
    assert str(data / "train.parquet") in lines[0] and "vpo preprocess" in lines[0]
    pd.DataFrame({"data_source": [], "prompt": [], "reward_model": []}).to_parquet(data / "train.parquet")
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 1 and "has no rows" in done.stderr and "Traceback" not in done.stderr
    debug = subprocess.run(argv, capture_output=True, text=True, env={**env, "VPO_DEBUG": "1"}, cwd=REPO)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def one_line_error(argv, cwd):
    import os

    env = {k: v for k, v in os.environ.items() if k != "VPO_DEBUG"}
    done = subprocess.run([sys.executable, "-m", "vpo.cli", *argv], capture_output=True, text=True, env=env, cwd=cwd)
    lines = [line for line in done.stderr.splitlines() if line.startswith("vpo ")]
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-1500:]
    return lines[0]


@pytest.mark.parametrize(
    "name, content, argv, words",
    [
        ("evalseed0.json", "{not json", ["aggregate", "evals", "--out-dir", "agg"], "is not readable JSON"),
        ("train.json", "[1, 2]", ["aggregate", "training", "--out", "curves.csv"], "holds a JSON list, not an object"),
        (
            "summary.csv",
            "",
            ["table", "main", "--best-at", "6", "--methods", "grpo", "--tasks", "maze", "--out", "t.md", "--summary"],
            "is empty",
        ),
        (
            "summary.csv",
            "task,method,metric,k,mean,stderr,n_seeds\n",
            ["plot", "pass_at_k", "--methods", "grpo", "--tasks", "maze", "--out", "x.pdf", "--summary"],
            "has a header but no rows",
        ),
    ],
)
def test_damaged_inputs_name_the_file_and_the_rebuild_command(tmp_path, name, content, argv, words):
    (tmp_path / name).write_text(content)
    line = one_line_error([*argv, name], tmp_path)
    assert words in line and name in line and f"snakemake --cores all -f {name}" in line


def test_a_damaged_model_names_the_directory(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{bad")
    data = tmp_path / "data"
    from vpo.task import TASKS

    TASKS["maze"].preprocess(str(data), {"train_size": 1, "test_size": 1})
    line = one_line_error(
        [
            "eval",
            "--model",
            "model",
            "--task",
            "maze",
            "--method",
            "grpo",
            "--data",
            "data",
            "--seed",
            "0",
            "--config",
            str(REPO / "config.yaml"),
            "--out",
            "e.parquet",
        ],
        tmp_path,
    )
    assert "model is not a loadable model" in line and "snakemake --cores all -f model" in line
