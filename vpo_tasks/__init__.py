"""Task plugins. Each module registers one task with `vpo.task.register` on import.

Adding a task: write `vpo_tasks/<name>.py` and add its import line below.
"""

from vpo_tasks import maze  # noqa: E402,F401
