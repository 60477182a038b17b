"""The project's task plugins, one module each, declared in pyproject.toml under the `vpo.tasks`
entry-point group (`maze = "vpo_tasks.maze:MAZE"`); `vpo.task.TASKS` loads them on first use."""
