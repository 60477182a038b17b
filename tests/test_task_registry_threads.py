"""The task registry loads the `vpo.tasks` entry points once, and a thread that reads it while
another is loading waits for the load (veRL's reward workers score responses in threads)."""

from __future__ import annotations

import threading
import time

from vpo import task as task_module
from vpo_tasks.maze import MAZE


class SlowEntry:
    name, value = "maze", "vpo_tasks.maze:MAZE"

    def load(self):
        time.sleep(0.3)  # a slow plugin import
        return MAZE


def test_concurrent_readers_wait_for_the_entry_points(monkeypatch):
    monkeypatch.setattr(task_module, "entry_points", lambda group: [SlowEntry()])
    registry = task_module.TaskRegistry()
    monkeypatch.setattr(task_module, "TASKS", registry)  # register() writes into the module's registry
    seen = []
    threads = [threading.Thread(target=lambda: seen.append("maze" in registry)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [True] * 8
    assert list(registry) == ["maze"]
