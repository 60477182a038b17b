"""One trainer per cell: a second job writing a cell that a live process writes stops at once, naming
the cell and that process; a killed holder leaves nothing that blocks; evaluation seeds share a cell."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vpo.atomic import HOST
from vpo.cell_lock import CELL_LOCK, CellBusy, hold, writing_cell

REPO = Path(__file__).resolve().parents[1]


def holder(cell, *, output=None, what="vpo train maze/grpo/seed0"):
    """A separate process that takes the job's locks on `cell` and sleeps until killed."""
    code = textwrap.dedent(f"""
        import sys, time
        from vpo.cell_lock import writing_cell
        with writing_cell({str(cell)!r}, what={what!r}, output={output!r}):
            print("held", flush=True)
            time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_trainer_on_a_cell_stops_naming_the_cell_and_the_holder(tmp_path):
    cell = tmp_path / "runs" / "maze" / "grpo" / "seed0"
    proc = holder(cell)
    try:
        with pytest.raises(CellBusy) as err:
            with writing_cell(cell, what="vpo train maze/grpo/seed0"):
                pytest.fail("two trainers held one cell")
        message = str(err.value)
        assert str(cell) in message and f"pid {proc.pid} (vpo train maze/grpo/seed0)" in message
        with pytest.raises(CellBusy):  # an evaluation of the cell waits for its training too
            with writing_cell(cell, what="vpo eval", output="eval/evalseed0"):
                pass
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_releases_the_cell_and_its_note_is_cleared(tmp_path):
    cell = tmp_path / "cell"
    proc = holder(cell)
    os.kill(proc.pid, signal.SIGKILL)  # as a killed Snakemake's orphaned job dies at last
    proc.wait()
    with writing_cell(cell, what="vpo train again"):
        notes = sorted(p.name for p in cell.glob(CELL_LOCK + ".*"))
        assert notes == [f"{CELL_LOCK}.{os.getpid()}@{HOST}"]  # the dead holder's note is gone once looked at
    assert not list(cell.glob(CELL_LOCK + ".*"))


def test_another_hosts_note_is_reported_never_judged_by_a_local_pid(tmp_path):
    """A note left by a job on another node of a shared filesystem names its holder and stays, even
    when no local process has that pid (a local judgement would call a live job dead)."""
    from vpo.cell_lock import holders

    cell = tmp_path / "cell"
    cell.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (cell / f"{CELL_LOCK}.{gone.pid}@node-7.cluster").write_text("vpo train maze/vpo/seed0\n")
    (cell / f"{CELL_LOCK}.{gone.pid}@{HOST}").write_text("vpo train (dead, this host)\n")
    assert holders(cell / CELL_LOCK) == [f"pid {gone.pid} on node-7.cluster (vpo train maze/vpo/seed0)"]
    assert sorted(p.name for p in cell.glob(CELL_LOCK + ".*")) == [f"{CELL_LOCK}.{gone.pid}@node-7.cluster"]


def test_evaluation_seeds_of_one_cell_run_side_by_side_but_not_one_seed_twice(tmp_path):
    cell = tmp_path / "cell"
    proc = holder(cell, output="eval/evalseed0", what="vpo eval seed 0")
    try:
        with writing_cell(cell, what="vpo eval seed 1", output="eval/evalseed1"):
            pass  # shared cell lock, its own output lock
        with pytest.raises(CellBusy, match=r"vpo eval seed 0"):
            with writing_cell(cell, what="vpo eval seed 0 again", output="eval/evalseed0"):
                pass
        with pytest.raises(CellBusy):  # nor a retrain while the evaluation reads the cell
            with writing_cell(cell, what="vpo train"):
                pass
    finally:
        proc.kill()
        proc.wait()


def test_a_lock_is_released_when_its_block_ends(tmp_path):
    lock = tmp_path / ".x.lock"
    with hold(lock, what="first"):
        pass
    with hold(lock, what="second"):
        pass


def test_vpo_train_refuses_a_cell_another_trainer_holds(tmp_path, tiny_maze_data, tiny_base_model):
    """The reproduction: a trainer left running, and `vpo train` on the same cell again."""
    from vpo.cli import main

    cell = tmp_path / "run"
    proc = holder(cell)
    try:
        started = time.time()
        with pytest.raises(CellBusy, match=rf"pid {proc.pid} \(vpo train"):
            main(
                [
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
                    str(tiny_maze_data),
                    "--base-model",
                    str(tiny_base_model),
                    "--out",
                    str(cell),
                    "--preset",
                    "ci",
                    "--config",
                    str(REPO / "config.yaml"),
                ]
            )
        assert time.time() - started < 30  # at once, before any model loads
        assert not (cell / "metrics.jsonl").exists()
    finally:
        proc.kill()
        proc.wait()


def test_an_aggregate_stops_at_a_cell_being_trained_before_reading_it(tmp_path):
    """`vpo aggregate` beside a trainer once read 11, 36, then 58 steps of its metrics with rc 0."""
    from vpo.cli import main

    cell = tmp_path / "runs" / "maze" / "grpo" / "seed0"
    proc = holder(cell)
    try:
        (cell / "metrics.jsonl").write_text('{"step": 1, "pool_diversity": 0.5}\n')
        with pytest.raises(CellBusy, match=rf"{cell}.*pid {proc.pid} \(vpo train"):
            main(["aggregate", "training", "--out", str(tmp_path / "curves.csv"), str(cell / "train.json")])
        assert not (tmp_path / "curves.csv").exists()
    finally:
        proc.kill()
        proc.wait()
    with pytest.raises(FileNotFoundError, match="has not finished training"):  # trainer gone, no marker
        main(["aggregate", "training", "--out", str(tmp_path / "curves.csv"), str(cell / "train.json")])


def test_vpo_train_over_a_finished_cell_removes_its_marker_before_writing(
    tmp_path, tiny_maze_data, tiny_base_model, capsys
):
    """By hand over a finished cell, then killed: the old train.json once stood beside the new run's
    metrics, and merge failed naming the wrong thing."""
    from vpo.cli import main

    cell = tmp_path / "run"
    cell.mkdir()
    (cell / "train.json").write_text('{"backend": "local", "task": "maze", "method": "grpo", "seed": 0}')
    cmd = [
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
        str(tiny_maze_data),
        "--base-model",
        str(tiny_base_model),
        "--out",
        str(cell),
        "--preset",
        "ci",
        "--config",
        str(REPO / "config.yaml"),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (cell / "metrics.jsonl").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert (cell / "metrics.jsonl").exists(), "the trainer wrote no metrics"
        assert not (cell / "train.json").exists()
    finally:
        proc.kill()
        proc.wait()
    assert main(["merge", "--run", str(cell)]) == 1
    assert "has not finished training" in capsys.readouterr().err


def logging_holder(cell, log):
    """A trainer stand-in: holds `cell`, writes its log through vpo.joblog, prints a line a tenth of a second."""
    code = textwrap.dedent(f"""
        import sys, time
        from vpo import joblog
        from vpo.cell_lock import writing_cell
        with writing_cell({str(cell)!r}, what="vpo train maze/grpo/seed0"):
            joblog.start({str(log)!r})
            print("step 1", flush=True)
            for step in range(2, 10000):
                time.sleep(0.1)
                print(f"step {{step}}", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 30
    while not (log.exists() and "step 1" in log.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    return proc


def test_a_refused_rerun_leaves_the_running_trainers_log_in_place(tmp_path, tiny_maze_data, tiny_base_model):
    """After a killed Snakemake and --unlock: Snakemake deletes the rerun's log file (the running
    trainer's), then the rerun is refused the cell. The log once held only the refusal."""
    from vpo.cli import main

    cell, log = tmp_path / "run", tmp_path / "logs" / "train.log"
    proc = logging_holder(cell, log)
    try:
        log.unlink()  # what Snakemake does before it starts a job
        with pytest.raises(CellBusy):
            main(
                [
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
                    str(tiny_maze_data),
                    "--base-model",
                    str(tiny_base_model),
                    "--out",
                    str(cell),
                    "--preset",
                    "ci",
                    "--config",
                    str(REPO / "config.yaml"),
                    "--log",
                    str(log),
                ]
            )
        before = log.read_text()
        assert before.startswith("step 1\n") and "is in use" not in before
        time.sleep(0.5)
        assert len(log.read_text()) > len(before)  # the trainer's lines go on arriving under the path
    finally:
        proc.kill()
        proc.wait()
    # the next job at that path: the killed one's file is kept as failed, its own log replaces the path
    code = (
        "from vpo import joblog\n"
        f"own = joblog.start({str(log)!r})\nprint('next job', flush=True)\njoblog.finish({str(log)!r}, failed=False)\n"
        "print(own.exists())"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    kept = list(log.parent.glob("train.log.failed-*"))
    assert len(kept) == 1 and kept[0].read_text().startswith("step 1\n")
    assert log.read_text() == "next job\nFalse\n"  # printed after finish: still this job's file
    assert sorted(p.name for p in log.parent.iterdir()) == sorted(["train.log", kept[0].name])
