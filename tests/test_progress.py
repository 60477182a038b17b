"""Progress lines: time-based, with an ETA from this process's own pace."""

from vpo.progress import Progress, format_seconds


def test_lines_are_time_based_with_an_eta():
    now = [0.0]
    lines = []
    progress = Progress(10, "step", every_s=10.0, emit=lines.append, clock=lambda: now[0])
    for step in range(1, 11):
        now[0] = 4.0 * step  # 4 s per step
        progress.update(step, "score 0.1")
    # the first step, then one line per 10 s or more (steps 4, 7, 10), and the last step
    assert lines == [
        "step 1/10 score 0.1 (4 s elapsed, about 36 s left)",
        "step 4/10 score 0.1 (16 s elapsed, about 24 s left)",
        "step 7/10 score 0.1 (28 s elapsed, about 12 s left)",
        "step 10/10 score 0.1 (40 s elapsed, done)",
    ]
    assert all("\r" not in line for line in lines)


def test_a_resumed_run_estimates_from_its_own_steps():
    now = [0.0]
    lines = []
    progress = Progress(100, "step", start_done=60, emit=lines.append, clock=lambda: now[0])
    now[0] = 2.0
    progress.update(61)  # one step in 2 s, 39 left
    assert lines == ["step 61/100 (2 s elapsed, about 1 min 18 s left)"]
    assert format_seconds(3725) == "1 h 02 min" and format_seconds(59.6) == "1 min 00 s"
