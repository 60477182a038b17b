"""Progress lines for log files: at most one per `every_s` seconds (and always the last), each with
the elapsed time and an estimate of the time left. Plain lines, no carriage returns, so a job's log
reads the same in a terminal, in `less` and in a cluster's log viewer."""

from __future__ import annotations

import logging
import time
from typing import Callable


def format_seconds(seconds: float) -> str:
    """12 s, 3 min 05 s, 1 h 02 min."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """`update(done)` after each unit of work; prints `label done/total ... elapsed, about T left`.

    The estimate is the mean time per unit so far in this process times the units left, so a
    resumed run estimates from its own pace.
    """

    def __init__(
        self,
        total: int,
        label: str,
        *,
        every_s: float = 10.0,
        start_done: int = 0,
        emit: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total, self.label, self.every_s = int(total), label, every_s
        self.start_done = int(start_done)
        self.emit = emit or logging.getLogger("vpo.progress").info
        self.clock = clock
        self.t0 = clock()
        self.last = None  # time of the last line

    def update(self, done: int, detail: str = "") -> str | None:
        """Emit a line if `every_s` passed since the last one or the work is complete; returns it."""
        now = self.clock()
        if done < self.total and self.last is not None and now - self.last < self.every_s:
            return None
        self.last = now
        elapsed = now - self.t0
        units = done - self.start_done
        left = (self.total - done) * elapsed / units if units > 0 else float("nan")
        eta = "done" if done >= self.total else (f"about {format_seconds(left)} left" if units > 0 else "estimating")
        shown = f" {detail}" if detail else ""
        line = f"{self.label} {done}/{self.total}{shown} ({format_seconds(elapsed)} elapsed, {eta})"
        self.emit(line)
        return line
