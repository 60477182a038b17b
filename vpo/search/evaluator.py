"""The evaluation file OpenEvolve loads by path in its worker processes: a program is scored by its task.

A "program" is what OpenEvolve keeps of one model response: the first fenced block, else the whole
text (`openevolve.utils.code_utils.parse_full_rewrite`). A multi-answer model's response to a code task
holds m fenced programs, so the search's client (`program_client`) hands OpenEvolve every distinct one
in a single block, `---` lines between them, as a maze response keeps all its routes. Its answers are
the task's own split
(`Task.split_answers` with the cell's m: a VPO model writes m routes in one response), or the text
as one answer when it holds no slots. Its score is the best answer's task scalar (LiveCodeBench: the
fraction of tests passed; maze: the mean of the four objectives), and it is solved when that answer
is correct by the task's rule (all tests pass; the exit is reached).
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

from vpo.task import resolve


def score_program(task_name: str, text: str, ground_truth: dict[str, Any], m: int) -> dict[str, float]:
    """{combined_score, solved (0/1), answers, scorer_errors (0/1)} of one program text; never raises.
    Its answers are scored as training scores them (`Task.score_answers`: values forced into [0, 1], so a
    scorer giving percentages scores the search as it scores training and evaluation). A task whose code
    raises on the text, or whose scorer returns the wrong number of values, scores it 0 with scorer_errors 1,
    which the search counts and reports (`vpo.search.evolve.search_problem`): model output never crashes a search,
    and a scorer bug shows."""

    task = resolve(task_name)
    try:
        answers = task.split_answers(text, m) or [text]
        vectors = task.score_answers(answers, ground_truth)
    except Exception:
        return {"combined_score": 0.0, "solved": 0.0, "answers": 0.0, "scorer_errors": 1.0}
    scalars = [float(task.scalar(v)) for v in vectors]
    best = max(range(len(scalars)), key=scalars.__getitem__)
    return {
        "combined_score": scalars[best],
        "solved": float(any(task.is_correct(v) for v in vectors)),
        "answers": float(len(answers)),
        "scorer_errors": 0.0,
    }


def program_response(task_name: str, text: str, m: int) -> str:
    """A response as OpenEvolve should read it: for m > 1 on a code task, its distinct programs
    (`Task.split_answers`) in one ```python block joined by `---` lines; otherwise the text unchanged."""

    task = resolve(task_name)
    if m == 1 or task.program_language != "python":
        return text
    try:
        codes = task.split_answers(text, m)
    except Exception:  # model output never crashes a search: the response goes on as it came
        return text
    return "```python\n" + "\n---\n".join(codes) + "\n```" if len(codes) >= 2 else text


def program_client(model_cfg, *, task: str, m: int):
    """OpenEvolve's `init_client` for the search: its own OpenAI client, each response passed through
    `program_response` (a module-level function, so that OpenEvolve's workers can unpickle it)."""
    from openevolve.llm.openai import OpenAILLM

    class ProgramClient(OpenAILLM):
        async def generate_with_context(self, system_message, messages, **kwargs):
            text = await super().generate_with_context(system_message, messages, **kwargs)
            return program_response(task, text, m) if isinstance(text, str) else text

    return ProgramClient(model_cfg)


def evaluate(program_path: str, task: str, problem_file: str, m: int) -> dict[str, float]:
    """OpenEvolve's entry point (its `evaluator_args` supply task, problem_file and m)."""
    problem = json.loads(Path(problem_file).read_text())
    return score_program(task, Path(program_path).read_text(), problem["ground_truth"], int(m))


def _die_with_parent() -> None:
    """OpenEvolve's worker processes end with the job: a worker the job's death orphaned would keep
    its CPU and its handles. Loaded in a worker only (the job's own process imports this module too)."""
    import signal
    import sys

    if multiprocessing.parent_process() is not None and sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_die_with_parent()
