"""Worst-case scoring time of each task's reward on 1 MB adversarial responses (goal: every call
under 50 ms). Prints one line per task with its slowest input (the median of 5 calls on it).

    python benchmarks/scorers.py
"""

from __future__ import annotations

import statistics
import time

from vpo.reward import compute_score

MB = 1_000_000
REPEATS = 5


def inputs(tag_pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Long texts built from a task's tags: unclosed openers, many closers, one huge block, noise."""
    out = {"noise": "x " * (MB // 2)}
    for opener, closer in tag_pairs:
        out[f"unclosed {opener}"] = (opener * (MB // len(opener)))[:MB]
        out[f"closers {closer}"] = (closer * (MB // len(closer)))[:MB]
        out[f"one block {opener}"] = opener + "word, 1, " * (MB // 9) + closer
    return out


CASES = {
    "maze": (
        {
            "grid_text": "S . .\n. . .\n. . E",
            "start": [0, 0],
            "end": [2, 2],
            "max_steps": 6,
            "num_gold": 0,
            "num_diamond": 0,
            "num_lava": 0,
            "score_mode": "convex_bonus",
        },
        [("<answer>", "</answer>"), ("<route_1>", "</route_1>"), ("---", "---")],
    ),
    "musique": (
        {
            "answer": "Miquette Giraudy",
            "answer_aliases": ["Miquette"],
            "supporting_indices_ordered": [3, 1],
            "num_hops": 2,
        },
        [("<answer>", "</answer>"), ("<support>", "</support>"), ("<response_1>", "</response_1>")],
    ),
    "eureqa": (
        {
            "chain_entities": [
                "Ava_Lindqvist",
                "The_Quiet_Harbor",
                "Northwind_Pictures",
                "Port_Elsby",
                "Saltmarsh_County",
            ],
            "answer": "Ava_Lindqvist",
            "num_hops": 5,
        },
        [("<entity_A>", "</entity_A>"), ("<ENTITY_e>", "</entity_E>"), ("<response_1>", "</response_1>")],
    ),
    "tool": (
        {
            "tool_calls_json": '[{"name": "GetNews", "parameters": {"page": "1"}}]',
            "response_text": "",
            "think_text": "",
            "raw_gt": "",
            "num_tool_calls": 1,
        },
        [
            ("<think>", "</think>"),
            ("<tool_call>", "</tool_call>"),
            ("<tool_call>{", "}"),
            ("<response_1>", "</response_1>"),
        ],
    ),
}


# Well-formed but huge tool calls: one call with many arguments, and many small calls.
BIG_CALL = (
    "<think>x</think><tool_call>"
    + '{"name": "GetNews", "parameters": {'
    + ", ".join(f'"k{i}": "v{i}"' for i in range(60_000))
    + "}}</tool_call>"
)
MANY_CALLS = (
    "<think>x</think><tool_call>"
    + "\n".join(f'{{"name": "GetNews{i % 7}", "parameters": {{"page": {i}}}}}' for i in range(20_000))
    + "</tool_call>"
)


def main() -> None:
    for task, (truth, tags) in CASES.items():
        worst, worst_name = 0.0, ""
        texts = inputs(tags)
        if task == "tool":
            texts.update({"one call, 60k arguments": BIG_CALL, "20k calls": MANY_CALLS})
        for name, text in texts.items():
            for m in (1, 3):
                runs = []
                for _ in range(REPEATS):  # the median of a few calls: one call is at the mercy of the machine
                    start = time.perf_counter()
                    compute_score(task, text, truth, {"num_solutions": m})
                    runs.append(time.perf_counter() - start)
                took = statistics.median(runs)
                if took > worst:
                    worst, worst_name = took, f"{name}, m={m}"
        verdict = "ok" if worst < 0.05 else "OVER"
        print(
            f"{task:8s} slowest call on a 1 MB response: {worst * 1000:7.1f} ms ({worst_name})  goal < 50 ms: {verdict}"
        )


if __name__ == "__main__":
    main()
