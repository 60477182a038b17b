"""The served judge's strategy keys (vpo/strategy_judge.py): its reply read strictly, a failed call
counted and handled by its rule, set RL skipping an unjudged group, and the local trainer training on
the judge's keys. Two servers answer: a rule-based stand-in speaking the chat-completions protocol
(what a capable judge model would reply is not computable here) and the project's own loopback server
with a tiny model, whose replies are no such object (every call fails)."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import yaml

from vpo.advantage import set_rl_advantage
from vpo.strategy_judge import (
    JUDGE_REPLY,
    JUDGE_SYSTEM,
    UNJUDGED,
    JudgeSettings,
    StrategyJudge,
    group_keys,
    judge_messages,
    read_labels,
)

REPO = Path(__file__).resolve().parents[1]


def last_line_labels(body: dict) -> list[int]:
    """The stand-in judge's rule: responses with equal last lines share a strategy; an empty one has none."""
    user = body["messages"][-1]["content"]
    shown = re.split(r"\n\[\d+\]\n", user.split("Responses:", 1)[1].rsplit("\n\nReply with", 1)[0])[1:]
    first_seen: dict[str, int] = {}
    return [first_seen.setdefault(t.strip().splitlines()[-1], len(first_seen) + 1) if t.strip() else 0 for t in shown]


class LastLineJudge(BaseHTTPRequestHandler):
    """Clusters a call's responses by their last line (0 for an empty one); records every request."""

    requests: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.headers.get("Authorization"), body))
        labels = last_line_labels(body)
        reply = {"choices": [{"message": {"role": "assistant", "content": json.dumps({"strategies": labels})}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in():
    LastLineJudge.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), LastLineJudge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_reply_is_read_strictly():
    assert read_labels('Sure: {"strategies": [1, 2, 1, 0]} done', 4) == [1, 2, 1, 0]
    for reply, words in [
        ("no object here", "no JSON object"),
        ('{"strategies": [1, 2]}', "4 integers"),
        ('{"clusters": [1, 2, 1, 0]}', "4 integers"),
        ('{"strategies": [1, 2, true, 0]}', "integers >= 0"),
        ('{"strategies": [1, -2, 1, 0]}', "integers >= 0"),
        ('{"strategies": [1, 2.5, 1, 0]}', "integers >= 0"),
    ]:
        with pytest.raises(ValueError, match=words):
            read_labels(reply, 4)


def test_keys_from_labels_and_from_a_failed_call():
    task = ["a", "degenerate", "b", "c"]
    assert group_keys([3, 3, 5, 0], task, "skip") == ["judge:3", "degenerate", "judge:5", "degenerate"]
    assert group_keys(None, task, "skip") == [UNJUDGED] * 4
    distinct = group_keys(None, task, "distinct")
    assert distinct[1] == "degenerate" and len({distinct[0], distinct[2], distinct[3]}) == 3


def test_the_prompt_is_the_one_docs_methods_quotes():
    docs = " ".join((REPO / "docs" / "methods.md").read_text().split())
    assert " ".join(JUDGE_SYSTEM.split()) in docs and " ".join(JUDGE_REPLY.split()) in docs
    messages = judge_messages("Find x.", ["abcdef", "xyz"], max_chars=3)
    assert messages[0] == {"role": "system", "content": JUDGE_SYSTEM}
    assert (
        "Find x." in messages[1]["content"]
        and "[1]\ndef" in messages[1]["content"]
        and "[2]\nxyz" in messages[1]["content"]
    )


def test_settings_name_what_is_wrong():
    with pytest.raises(ValueError, match="need url and model"):
        JudgeSettings.from_config({"url": "http://127.0.0.1:1/v1"})
    with pytest.raises(ValueError, match="need url and model"):
        JudgeSettings.from_config({"url": "u", "model": "m", "temprature": 0})
    with pytest.raises(ValueError, match="on_failure 'retry'"):
        JudgeSettings.from_config({"url": "u", "model": "m", "on_failure": "retry"})


def test_one_call_per_group_at_temperature_zero_with_the_key(stand_in, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "secret")
    judge = StrategyJudge(JudgeSettings(url=stand_in, model="judge", api_key_env="JUDGE_KEY"))
    texts = ["go\nleft", "go\nright", "again\nleft", "", "x\nup", "y\nup"]
    groups = [7, 7, 7, 7, 9, 9]
    keys, metrics = judge(["q7"] * 4 + ["q9"] * 2, texts, groups, ["t"] * 6)
    assert keys[:4] == ["judge:1", "judge:2", "judge:1", "degenerate"] and keys[4] == keys[5] == "judge:1"
    assert metrics["judge/groups"] == 2.0 and metrics["judge/failed_groups"] == 0.0
    assert len(LastLineJudge.requests) == 2
    for auth, body in LastLineJudge.requests:
        assert auth == "Bearer secret" and body["temperature"] == 0.0 and body["model"] == "judge"


def test_an_unreachable_judge_fails_every_group_and_set_rl_skips_them():
    judge = StrategyJudge(JudgeSettings(url="http://127.0.0.1:9/v1", model="judge", timeout_s=2))
    rewards = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    keys, metrics = judge(["q"] * 8, ["a"] * 8, groups, list("abcdabcd"))
    assert keys == [UNJUDGED] * 8 and metrics["judge/failed_groups"] == 2.0
    adv, diagnostics = set_rl_advantage(rewards, groups, strategy_keys=keys, set_size=2)
    assert np.all(adv == 0.0) and diagnostics["set_rl/skipped_groups"] == 2.0
    # one unjudged group beside a judged one: the judged group's advantages are its own computation
    mixed = [UNJUDGED] * 4 + list("abca")
    adv, diagnostics = set_rl_advantage(rewards, groups, strategy_keys=mixed, set_size=2)
    alone, _ = set_rl_advantage(rewards[4:], groups[4:], strategy_keys=list("abca"), set_size=2)
    assert np.all(adv[:4] == 0.0) and np.array_equal(adv[4:], alone) and diagnostics["set_rl/skipped_groups"] == 1.0
    distinct = StrategyJudge(
        JudgeSettings(url="http://127.0.0.1:9/v1", model="judge", on_failure="distinct", timeout_s=2)
    )
    keys, _ = distinct(["q"] * 4, ["a"] * 4, [0] * 4, list("aabb"))
    assert len(set(keys)) == 4


def test_the_projects_server_with_a_tiny_model_is_a_judge_whose_calls_fail(tiny_base_model):
    from vpo.generate import TorchBackend
    from vpo.search.llm_server import LoopbackServer

    backend = TorchBackend(tiny_base_model, progress=False)
    with LoopbackServer(backend, "tiny", max_tokens_cap=16) as server:
        settings = JudgeSettings(url=server.url, model="tiny", max_tokens=16, api_key_env="VPO_TEST_JUDGE")
        import os

        os.environ["VPO_TEST_JUDGE"] = server.token
        try:
            keys, metrics = StrategyJudge(settings)(["q"] * 3, ["R", "RD", "D"], [0, 0, 0], list("abc"))
        finally:
            del os.environ["VPO_TEST_JUDGE"]
        assert server.requests == 1  # answered (a maze move list, not the judge's object): a failed call
    assert keys == [UNJUDGED] * 3 and metrics["judge/failed_groups"] == 1.0


def test_the_local_trainer_trains_on_the_judges_keys(stand_in, tiny_maze_data, tiny_base_model, tmp_path):
    from conftest import TINY_LOCAL_TRAINER

    from vpo.cli import main

    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw["presets"]["ci"]["local_trainer"] = dict(TINY_LOCAL_TRAINER)
    raw["method_settings"]["poly_epo"] = {"set_size": 2, "judge": {"url": stand_in, "model": "judge"}}
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = tmp_path / "run"
    args = ["train", "--backend", "local", "--task", "maze", "--method", "poly_epo", "--seed", "0", "--preset", "ci"]
    assert (
        main(
            args
            + [
                "--config",
                str(cfg),
                "--data",
                str(tiny_maze_data),
                "--base-model",
                str(tiny_base_model),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 4 and len(LastLineJudge.requests) == 4 * 2  # one call per group and step
    for record, calls in zip(records, np.array_split(np.arange(8), 4)):
        assert record["judge/groups"] == 2.0 and record["judge/failed_groups"] == 0.0
        bodies = [LastLineJudge.requests[i][1] for i in calls]
        assert all(body["messages"][0]["content"] == JUDGE_SYSTEM for body in bodies)
        judged = np.mean([len(set(last_line_labels(body)) - {0}) for body in bodies])
        assert record["strategies_per_group"] <= judged  # the judge's strategies (a response without a route: none)
        assert record["set_rl/skipped_groups"] == 0.0  # groups of 3, sets of 2
