"""Strategy keys from a served judge model: one chat call per prompt group clusters its responses.

Poly-EPO's math runs cluster a group's N responses with an LLM judge in one call at temperature 0 (the
polychromic papers; the authors' code, `verl/trainer/ppo/diversity_judge.py`); this is that option for
the keyed methods (`poly_epo`, `grpo_div`), set in `method_settings.<method>.judge`:

    judge: {url: http://127.0.0.1:8000/v1, model: <the served name>, on_failure: skip}

The judge is any OpenAI-compatible chat-completions server: vLLM's (`vllm serve <model> --port 8000`
on a GPU of its own) or the project's loopback server (`vpo.search.llm_server`). Its prompt is JUDGE_SYSTEM and
`judge_messages` below, in this project's words (docs/methods.md quotes them; a test holds the two equal).
The reply is one JSON object {"strategies": [one integer per response]}: equal integers, one strategy;
0, a response that shows none (a degenerate key). A response without an answer (the task's key is
`degenerate`) stays degenerate whatever the judge says.

A call that fails (no answer, an HTTP error, a reply that is not that object) is counted
(`judge/failed_groups`) and handled by `on_failure`: `skip` (default) gives the group the key UNJUDGED,
and set RL gives a group holding it advantage 0 (counted in `set_rl/skipped_groups`); `distinct` gives
every response a key of its own, as the authors' code does (the most diverse reading).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any, Sequence

from vpo.task import DEGENERATE_STRATEGY

UNJUDGED = "unjudged"  # the key of every response of a group whose judge call failed, under on_failure: skip
_FAILURE_RULES = ("skip", "distinct")

JUDGE_SYSTEM = (
    "You compare how several responses to one problem were reached. Two responses share a strategy when "
    "they take the same overall approach through the same key intermediate steps; a slip in arithmetic or "
    "a different final value alone does not make a new strategy. A response that shows no approach (empty, "
    "cut off before any reasoning, repetition, a bare guess) has strategy 0."
)
JUDGE_REPLY = (
    'Reply with one JSON object and nothing else: {"strategies": [one integer per response, in order]}, '
    "equal integers for responses that share a strategy, 0 for a response that shows none."
)


@dataclass(frozen=True)
class JudgeSettings:
    """`method_settings.<keyed method>.judge` (config.yaml)."""

    url: str  # the server's OpenAI base URL, e.g. http://127.0.0.1:8000/v1
    model: str  # the model name the server answers to
    on_failure: str = "skip"  # skip: the group trains with advantage 0; distinct: every response its own key
    api_key_env: str | None = None  # the environment variable holding the server's key (none: no key sent)
    timeout_s: float = 120.0  # one call's limit
    max_tokens: int = 512  # the reply's token limit (N small integers and the JSON around them)
    max_response_chars: int = 6000  # each response is cut to its last this many characters in the prompt
    workers: int = 16  # concurrent calls (one per group)

    @classmethod
    def from_config(cls, block: dict) -> "JudgeSettings":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(block) - known)
        if unknown or not {"url", "model"} <= set(block):
            raise ValueError(f"judge settings need url and model and take only {sorted(known)}; got {sorted(block)}")
        settings = cls(**block)
        if settings.on_failure not in _FAILURE_RULES:
            raise ValueError(f"judge on_failure {settings.on_failure!r} is not one of {_FAILURE_RULES}")
        return settings


def judge_messages(question: str, responses: Sequence[str], max_chars: int) -> list[dict[str, str]]:
    """The chat messages of one group's call: the problem, the numbered responses (each its last
    max_chars characters: where the approach ends), and the reply's form."""
    shown = "\n\n".join(f"[{i}]\n{text[-max_chars:] if max_chars else text}" for i, text in enumerate(responses, 1))
    user = f"Problem:\n{question}\n\nResponses:\n{shown}\n\n{JUDGE_REPLY}"
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def read_labels(reply: str, n: int) -> list[int]:
    """The n strategy labels of a judge's reply; ValueError saying what is wrong with it."""
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0 or end < start:
        raise ValueError("the reply holds no JSON object")
    labels = json.loads(reply[start : end + 1]).get("strategies")
    if not isinstance(labels, list) or len(labels) != n:
        raise ValueError(f"'strategies' must list {n} integers, got {labels!r}")
    if any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in labels):
        raise ValueError(f"'strategies' must hold integers >= 0, got {labels!r}")
    return labels


def ask(settings: JudgeSettings, messages: list[dict[str, str]]) -> str:
    """One chat completion's text from the judge server (temperature 0, seed 0)."""
    body = {
        "model": settings.model,
        "messages": messages,
        "temperature": 0.0,
        "max_tokens": settings.max_tokens,
        "seed": 0,
    }
    headers = {"Content-Type": "application/json"}
    if settings.api_key_env:
        headers["Authorization"] = f"Bearer {os.environ.get(settings.api_key_env, '')}"
    request = urllib.request.Request(
        settings.url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(), headers=headers
    )
    with urllib.request.urlopen(request, timeout=settings.timeout_s) as reply:
        return json.loads(reply.read())["choices"][0]["message"]["content"] or ""


def group_keys(labels: list[int] | None, task_keys: Sequence[str], on_failure: str) -> list[str]:
    """A group's strategy keys from its judge labels (None: the call failed)."""
    if labels is None:
        if on_failure == "skip":
            return [UNJUDGED] * len(task_keys)
        return [
            DEGENERATE_STRATEGY if key == DEGENERATE_STRATEGY else f"judge-failed:{i}"
            for i, key in enumerate(task_keys)
        ]
    return [
        DEGENERATE_STRATEGY if key == DEGENERATE_STRATEGY or label == 0 else f"judge:{label}"
        for key, label in zip(task_keys, labels)
    ]


class StrategyJudge:
    """`judge(questions, responses, group_ids, task_keys)` -> (the judge's keys, its metrics): one call per
    group, `settings.workers` at a time; each group's question is that of its first rollout."""

    def __init__(self, settings: JudgeSettings):
        self.settings = settings

    def _labels(self, question: str, responses: list[str]) -> list[int] | None:
        try:
            reply = ask(self.settings, judge_messages(question, responses, self.settings.max_response_chars))
            return read_labels(reply, len(responses))
        except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
            return None  # no answer, an HTTP error, or a reply of another form: a failed call

    def __call__(
        self, questions: Sequence[str], responses: Sequence[str], group_ids: Sequence[Any], task_keys: Sequence[str]
    ) -> tuple[list[str], dict[str, float]]:
        started = time.time()
        members: dict[Any, list[int]] = {}
        for i, group in enumerate(group_ids):
            members.setdefault(group, []).append(i)
        groups = list(members.values())
        with ThreadPoolExecutor(max_workers=max(1, min(self.settings.workers, len(groups)))) as pool:
            labels = list(pool.map(lambda rows: self._labels(questions[rows[0]], [responses[i] for i in rows]), groups))
        keys = [""] * len(responses)
        for rows, found in zip(groups, labels):
            for i, key in zip(rows, group_keys(found, [task_keys[i] for i in rows], self.settings.on_failure)):
                keys[i] = key
        return keys, {
            "judge/groups": float(len(groups)),
            "judge/failed_groups": float(sum(found is None for found in labels)),
            "judge/seconds": round(time.time() - started, 4),
        }


def row_question(row: dict) -> str:
    """A prepared row's problem as the judge reads it: the text of its last user message."""
    users = [message["content"] for message in row["prompt"] if message["role"] == "user"]
    return str(users[-1]) if users else ""


def judge_from_settings(method_settings: dict) -> StrategyJudge | None:
    """The judge a method's settings ask for (`judge:`), or None."""
    block = method_settings.get("judge")
    return StrategyJudge(JudgeSettings.from_config(dict(block))) if block else None
