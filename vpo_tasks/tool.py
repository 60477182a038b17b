"""tool: ToolRL function calling (k = 4: format, tool_name, arg_key, arg_value).

The system prompt lists the available tools and asks for `<think>...</think>`, then optionally a
`<tool_call>` block with one JSON object {"name", "parameters"} per line, and optionally
`<response>...</response>`. The reward (docs/tasks.md, the vector the paper trained on, not
ToolRL's scalar) checks the layout, then aligns predicted calls with gold calls: multiset F1 of
tool names, set F1 of argument keys, and typed matching of argument values. Multi-answer
responses use `<response_i>` slots appended to the user turn (the format itself lives in the
system prompt).

Data: ToolRL's `dataset/rlla_4k/{train,test}.parquet` (3,920 / 80 rows) from `data.url`, or the
same two files in a local directory (`data.path`).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import string
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from vpo.atomic import write_parquet_atomic
from vpo.task import as_random, settings_from
from vpo_tasks.hub import DataUnavailable, local_files
from vpo_tasks.response_slots import ResponseSlotTask, first_block

PUNCTUATION = str.maketrans("", "", string.punctuation)
_SEPARATORS = re.compile(r"[ \t\r\n,]*")  # skipped between the JSON objects of a tool_call body
OBJECT_BREAK = re.compile(r"}(?=[ \t\r]*\n[ \t\r\n]*{)")  # an object ending a line before the next one
_DECODER = json.JSONDecoder()


@dataclass
class ToolSettings:
    path: str | None = None  # directory with the raw rlla_4k train.parquet and test.parquet; None: download
    url: str = "https://raw.githubusercontent.com/qiancheng0/ToolRL/main/dataset/rlla_4k"  # base of the two files
    timeout_s: float = 20.0  # download timeout per file
    train_size: int | None = None  # cap on training rows; None: all
    test_size: int | None = None  # cap on test rows; None: all

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "ToolSettings":
        return settings_from(cls, values, "tool")


# ---- parsing (docs/tasks.md, tool) ---------------------------------------------------------------
def _objects(body: str) -> list[Any]:
    """JSON values of a tool_call body: one array, or objects separated by spaces, newlines, commas."""
    if body.startswith("["):
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):
            return []
        return [item for item in value if isinstance(item, dict)]  # text opening with "[" parses to a list
    # Fast path: the usual body, one object per line, read as one JSON array by putting a comma after
    # each `}` that ends a line before a `{`. The newline stays, and a raw newline is invalid inside
    # a JSON string, so when the joined text parses every comma fell between values and its items
    # are the objects the stream below reads (up to the first non-object).
    try:  # a broken fast path falls back to the stream, which reads the same objects
        items = json.loads("[" + OBJECT_BREAK.sub("},", body) + "]")
    except (ValueError, RecursionError):
        return _object_stream(body)
    return list(itertools.takewhile(lambda item: isinstance(item, dict), items))


def _object_stream(body: str) -> list[dict]:
    """Objects read one by one from the start, skipping separators; stops at the first character
    that does not open an object, or at the first invalid object."""
    found, i = [], 0
    while True:
        i = _SEPARATORS.match(body, i).end()
        if not body.startswith("{", i):
            return found
        try:
            value, i = _DECODER.raw_decode(body, i)
        except (ValueError, RecursionError):
            return found
        found.append(value)


def parse_calls(body: str | None) -> list[dict[str, Any]]:
    """[{name, parameters}] of a tool_call body; `arguments` stands in for missing `parameters`."""
    calls = []
    for obj in _objects(body.strip()) if body else []:
        params = obj["parameters"] if "parameters" in obj else obj.get("arguments")
        calls.append({"name": str(obj.get("name", "")), "parameters": params if type(params) is dict else {}})
    return calls


def parse_response(text: str) -> dict[str, Any]:
    think, body, response = (first_block(text, f"<{tag}>", f"</{tag}>") for tag in ("think", "tool_call", "response"))
    return {
        "has_think": think is not None,
        "think": (think or "").strip(),
        "has_tool_call": body is not None,
        "body_nonempty": bool((body or "").strip()),
        "calls": parse_calls(body),
        "response": (response or "").strip(),
    }


# ---- scoring ---------------------------------------------------------------------------------
def normalize(value: Any) -> str:
    """null -> ""; else str(value), lowercased, punctuation deleted, whitespace collapsed (articles kept)."""
    return "" if value is None else " ".join(str(value).lower().translate(PUNCTUATION).split())


def multiset_f1(pred: Sequence[Any], gold: Sequence[Any]) -> float:
    if not pred and not gold:
        return 1.0
    return 2 * sum((Counter(pred) & Counter(gold)).values()) / (len(pred) + len(gold))


def set_f1(pred: set, gold: set) -> float:
    """F1 of two sets (1 when both are empty)."""
    if not pred and not gold:
        return 1.0
    return 2 * len(pred & gold) / (len(pred) + len(gold))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def value_match(pred: Any, gold: Any) -> float:
    """How well a predicted argument value matches the gold one (docs/tasks.md, tool: typed rules)."""
    if isinstance(gold, bool) or isinstance(pred, bool):
        return float(bool(gold) == bool(pred))
    if _number(gold):
        if _number(pred):
            return float(gold == pred)
        try:
            return float(abs(float(str(pred)) - float(gold)) < 1e-9)
        except (ValueError, OverflowError):
            return float(normalize(pred) == normalize(gold))
    if isinstance(gold, list):
        items = pred if isinstance(pred, list) else [pred]
        return multiset_f1([normalize(x) for x in items], [normalize(x) for x in gold])
    if isinstance(gold, dict):
        return set_f1(set(pred), set(gold)) if isinstance(pred, dict) else 0.0
    if isinstance(gold, str) and isinstance(pred, str):
        return multiset_f1(normalize(pred).split(), normalize(gold).split())
    return float(normalize(pred) == normalize(gold))


def align(pred: list[dict], gold: list[dict], names: list[str]) -> list[tuple[dict | None, dict | None]]:
    """(gold, pred) pairs: each gold call greedily takes the unused prediction with the best
    100 * (same non-empty normalised name) + |shared keys|, first on ties; leftovers stay unpaired.
    names: the predictions' normalised names."""
    unused_names = Counter(names)
    used = [False] * len(pred)
    pairs: list[tuple[dict | None, dict | None]] = []
    for g in gold:
        name, keys = normalize(g["name"]), g["parameters"].keys()
        # the best score any unused prediction could reach: stop scanning once one reaches it
        ceiling = 100 * (bool(name) and unused_names[name] > 0) + len(keys)
        best, best_score = -1, -1
        for j, p in enumerate(pred):
            if not used[j]:
                score = 100 * (bool(name) and names[j] == name) + len(keys & p["parameters"].keys())
                if score > best_score:
                    best, best_score = j, score
                    if score >= ceiling:
                        break
        if best >= 0:
            used[best] = True
            unused_names[names[best]] -= 1
        pairs.append((g, pred[best] if best >= 0 else None))
    return pairs + [(None, p) for j, p in enumerate(pred) if not used[j]]


def score_calls(pred: list[dict], gold: list[dict]) -> tuple[float, float, float]:
    if not pred and not gold:
        return 1.0, 1.0, 1.0
    normal = {name: normalize(name) for name in {c["name"] for c in pred}}  # long call lists repeat names
    pred_names = [normal[c["name"]] for c in pred]
    names = multiset_f1(pred_names, [normalize(c["name"]) for c in gold])
    pairs = align(pred, gold, pred_names)
    matched = [(g, p) for g, p in pairs if g is not None and p is not None]  # unmatched pairs score 0
    keys = sum(set_f1(set(p["parameters"]), set(g["parameters"])) for g, p in matched)
    values = sum(
        sum(value_match(p["parameters"][k], v) for k, v in g["parameters"].items() if k in p["parameters"])
        / len(g["parameters"])
        if g["parameters"]
        else 1.0
        for g, p in matched
    )
    return names, keys / len(pairs), values / len(pairs)


def gold_calls(truth: dict[str, Any]) -> list[dict[str, Any]]:
    """The gold calls stored at preprocessing (`tool_calls_json`, already in parse_calls' shape)."""
    stored = json.loads(truth.get("tool_calls_json") or "[]")
    return [
        {"name": str(c.get("name", "")), "parameters": c["parameters"] if isinstance(c.get("parameters"), dict) else {}}
        for c in stored
        if isinstance(c, dict)
    ]


def score_answer(text: str, truth: dict[str, Any]) -> list[float]:
    parsed = parse_response(text)
    gold = gold_calls(truth)
    if gold:
        fmt = parsed["has_think"] and parsed["has_tool_call"] and bool(parsed["calls"])
    else:
        fmt = parsed["has_think"] and not parsed["body_nonempty"]
    return [float(fmt), *score_calls(parsed["calls"], gold)]


# ---- data ------------------------------------------------------------------------------------
def download(settings: ToolSettings, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        target = into / f"{split}.parquet"
        if target.is_file():
            continue
        try:
            with urllib.request.urlopen(f"{settings.url}/{split}.parquet", timeout=settings.timeout_s) as answer:
                data = answer.read()
        except OSError as err:
            raise DataUnavailable(
                f"tool: cannot download {settings.url}/{split}.parquet ({err}); download dataset/rlla_4k's "
                "train.parquet and test.parquet once and set task_settings.tool.data.path "
                "(or `vpo preprocess --task tool --set path=DIR`) to their directory"
            ) from None
        tmp = target.with_suffix(".part")
        tmp.write_bytes(data)
        tmp.replace(target)
    return into


_APPEND = r"\Z"  # the multi-answer instruction is appended to the user turn (the format is in the system prompt)


class ToolTask(ResponseSlotTask):
    name = "tool"
    label = "ToolRL"
    data_source = "tool"
    ability = "tool_use"
    objectives = (
        ("format", "Producing a well-formed structured response"),
        ("tool_name", "Calling the right tools"),
        ("arg_key", "Filling in the right argument keys"),
        ("arg_value", "Using the right argument values"),
    )
    scalar_weights = (0.25, 0.25, 0.25, 0.25)
    default_m = 3
    template_fields = ("request",)
    required_template_fields = ("request",)
    settings_class = ToolSettings

    def rows(self, split: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for i, record in enumerate(records):
            turns = [{"role": str(m["role"]), "content": str(m["content"])} for m in record["prompt"]]
            # a template replaces the last user turn; the system prompt (with the output format) stays
            fields = {"request": next((t["content"] for t in reversed(turns) if t["role"] == "user"), "")}
            raw = str(record["reward_model"]["ground_truth"])
            parsed = parse_response(raw)
            truth = {
                "tool_calls_json": json.dumps(parsed["calls"]),
                "response_text": parsed["response"],
                "think_text": parsed["think"],
                "raw_gt": raw,
                "num_tool_calls": len(parsed["calls"]),
            }
            out.append(
                self.row(
                    turns,
                    truth,
                    split=split,
                    index=i,
                    task_id=f"tool-{split}-{i}",
                    source_idx=int((record.get("extra_info") or {}).get("index", i)),
                    prompt_fields=json.dumps(fields),
                )
            )
        return out

    def preprocess(self, out_dir: str, settings: dict[str, Any] | None = None) -> tuple[str, str]:
        import pandas as pd

        s = ToolSettings.from_dict(settings)
        source = Path(s.path).expanduser() if s.path else download(s, Path(out_dir) / ".download")
        files = local_files("tool", source, {"train": "train.parquet", "test": "test.parquet"})
        records = {split: pd.read_parquet(path).to_dict("records") for split, path in files.items()}
        return (
            write_parquet_atomic(
                self.rows("train", records["train"][: s.train_size]), os.path.join(out_dir, "train.parquet")
            ),
            write_parquet_atomic(
                self.rows("test", records["test"][: s.test_size]), os.path.join(out_dir, "test.parquet")
            ),
        )

    # -- answers
    def parses(self, text: str) -> bool:
        return first_block(str(text), "<think>", "</think>") is not None

    def canonical_answer(self, answer: str) -> str:
        """Its tool calls (names and parameters, in order, as sorted-key JSON), else its normalised response."""
        parsed = parse_response(str(answer))
        if parsed["calls"]:
            return json.dumps(parsed["calls"], sort_keys=True, default=str)
        return normalize(parsed["response"])

    def score_answer(self, answer: str, ground_truth: dict[str, Any]) -> list[float]:
        return score_answer(str(answer), ground_truth)

    def multi_rewrites(self, m: int) -> list[tuple[str, str]]:
        return [(_APPEND, "\n\n" + self.multi_format(m))]

    def multi_format(self, m: int) -> str:
        return (
            f"Additional instruction, replacing the single-attempt output format above: give {m} genuinely "
            f"different attempts (different tools, arguments or reasoning, not paraphrases), each in its own "
            f"block <response_1></response_1> to <response_{m}></response_{m}>. Inside each block follow "
            "the output format of the system prompt: <think>, then <tool_call> and/or <response>."
        )

    # -- warm-start demonstrations (CPU trainer only)
    def demonstration(self, row: dict[str, Any], rng: Any, n_answers: int) -> str:
        """Answers of mixed quality built from the gold answer: as is, with a value or a tool name
        changed, with a call dropped, or without the think block."""
        rng = as_random(rng)
        truth = row["reward_model"]["ground_truth"]
        calls = json.loads(truth["tool_calls_json"])

        def one() -> str:
            chosen = [json.loads(json.dumps(c)) for c in calls if len(calls) == 1 or rng.random() < 0.8]
            for call in chosen:
                if rng.random() < 0.3 and call["parameters"]:
                    call["parameters"][rng.choice(sorted(call["parameters"]))] = rng.choice(["1", "none", "auto"])
                if rng.random() < 0.15:
                    call["name"] = call["name"] + "V2"
            parts = [] if rng.random() < 0.1 else ["<think>I should pick the right tool.</think>"]
            if chosen:
                parts.append("<tool_call>\n" + "\n".join(json.dumps(c) for c in chosen) + "\n</tool_call>")
            if truth["response_text"] or not chosen:
                parts.append(f"<response>{truth['response_text'] or 'Done.'}</response>")
            return "\n".join(parts)

        if n_answers <= 1:
            return one()
        return "\n".join(f"<response_{i}>\n{one()}\n</response_{i}>" for i in range(1, n_answers + 1))


TOOL = ToolTask()  # found through the vpo.tasks entry point `tool` (pyproject.toml)
