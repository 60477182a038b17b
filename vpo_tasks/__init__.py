"""Task plugins. Each module registers one task with `vpo.task.register` on import.

Adding a task: write `vpo_tasks/<name>.py` and add its import line below.
"""
