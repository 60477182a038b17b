"""Evaluation candidates as the authors' evaluation builds them (docs/evaluation.md), with every
expected vector written out by hand: a repeated answer kept as a copy, an empty slot and a missing
one scoring as the empty answer, `---` splits, a single-answer chain scored on its whole text; the
goal-weight modes; the single-answer prefill."""

import numpy as np
import pandas as pd
import pytest

from vpo.evaluate import PromptPlan, candidate_frame, prompt_plan
from vpo.methods import get_method
from vpo.task import Task, resolve

ZERO4, ZERO5 = [0.0] * 4, [0.0] * 5


def pool(task_name, truth, responses, m, *, prefill=""):
    """The candidate vectors of one problem whose chains are `responses` (one prompt, len(responses) samples)."""
    task = resolve(task_name)
    row = {
        "prompt": [{"role": "user", "content": "q"}],
        "reward_model": {"ground_truth": truth},
        "extra_info": {"index": 0},
    }
    plan = PromptPlan([row["prompt"]], [0], [None], len(responses))
    frame = candidate_frame(task, [row], plan, [responses], m, single_answer_prefill=prefill)
    return frame, frame[task.objective_names[: int(frame["k"].iloc[0])]].to_numpy().tolist()


# ---- maze: S at the top left, E at the bottom right; the top route takes the gold, the left one the
# diamond through the lava (linear fractions, so the vectors are easy to read)
MAZE = {
    "grid_text": "S G .\nL # .\nD . E",
    "start": [0, 0],
    "end": [2, 2],
    "max_steps": 6,
    "num_gold": 1,
    "num_diamond": 1,
    "num_lava": 1,
    "score_mode": "linear",
}
TOP, LEFT = "RIGHT RIGHT DOWN DOWN", "DOWN DOWN RIGHT RIGHT"
V_TOP, V_LEFT = [1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]


def test_maze_route_slots_in_order_with_copies_and_empty_slots():
    frame, vectors = pool(
        "maze",
        MAZE,
        [
            f"<route_1>{TOP}</route_1> <route_2>{TOP}</route_2> <route_3></route_3>",  # a repeat, an empty slot
            f"<route_2>{LEFT}</route_2>",  # slots 1 and 3 missing
            f"{TOP}\n---\n{LEFT}",  # --- splits, one missing
            f"<answer>{LEFT}</answer> then <answer>{TOP}</answer>",  # >= 2 answer blocks
        ],
        m=3,
    )
    assert vectors == [V_TOP, V_TOP, ZERO4, ZERO4, V_LEFT, ZERO4, V_TOP, V_LEFT, ZERO4, V_LEFT, V_TOP, ZERO4]
    assert frame["chain"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert frame["slot"].tolist() == [0, 1, 2] * 4
    assert frame["parsed"].tolist() == [True, True, False, False, True, False, True, True, False, True, True, False]
    assert frame["scalar"].tolist() == pytest.approx([0.75, 0.75, 0, 0, 0.5, 0, 0.75, 0.5, 0, 0.5, 0.75, 0])


def test_maze_single_answer_chain_is_its_whole_text():
    _, vectors = pool(
        "maze",
        MAZE,
        [
            f"I go {TOP}.",  # no tags: every move word of the text
            f"<answer>{LEFT}</answer> not {TOP}",  # the first answer block only
            f"<route_1>{TOP}</route_1>",  # route tags mean nothing to a single answer: the whole text
            "no moves at all",
        ],
        m=1,
    )
    assert vectors == [V_TOP, V_LEFT, V_TOP, ZERO4]


def test_maze_multi_answer_chain_without_tags_is_route_one():
    _, vectors = pool("maze", MAZE, [f"I would go {TOP}"], m=3)
    assert vectors == [V_TOP, ZERO4, ZERO4]


# ---- the <response_i> tasks: no `---` fallback, so an untagged multi-answer chain holds m empty slots
MUSIQUE = {"answer": "Paris", "answer_aliases": ["City of Paris"], "supporting_indices_ordered": [3, 7], "num_hops": 2}
RIGHT_ANSWER = "<support>3, 7</support><answer>Paris</answer>"  # both hops, F1 1; hops 3-4 free
WRONG_ANSWER = "<support>7</support><answer>Lyon</answer>"  # hop 2 only, F1 0


def test_musique_slots_and_single_answers():
    frame, vectors = pool(
        "musique",
        MUSIQUE,
        [
            f"<response_1>{RIGHT_ANSWER}</response_1><response_2>{RIGHT_ANSWER}</response_2>",  # a copy; 3 missing
            f"<response_1>  </response_1><response_2>{WRONG_ANSWER}</response_2><response_3><support>3</support>"
            "</response_3>",  # empty; scored; no answer -> zeros
            f"{RIGHT_ANSWER}\n---\n{WRONG_ANSWER}",  # no tags: three empty slots
        ],
        m=3,
    )
    right, wrong = [1.0] * 5, [0.0, 1.0, 1.0, 1.0, 0.0]
    assert vectors == [right, right, ZERO5, ZERO5, wrong, ZERO5, ZERO5, ZERO5, ZERO5]
    assert frame["scalar"].iloc[0] == pytest.approx(1.0) and frame["scalar"].iloc[4] == pytest.approx(3 / 7)
    _, singles = pool("musique", MUSIQUE, [f"{RIGHT_ANSWER}\n---\n{WRONG_ANSWER}", WRONG_ANSWER, "Paris"], m=1)
    assert singles == [right, wrong, ZERO5]  # the whole text: its first support and answer blocks


EUREQA = {"chain_entities": ["Ada", "Bob", "Cy", "Di", "Ed"]}


def test_eureqa_slots_and_single_answers():
    good = "".join(f"<entity_{x}>{v}</entity_{x}>" for x, v in zip("ABCDE", ["Ada", "Bob", "Cy", "Di", "Ed"]))
    half = "<entity_A>Ada</entity_A><entity_B>Bo</entity_B><entity_C>the Cy</entity_C>"
    _, vectors = pool(
        "eureqa",
        EUREQA,
        [
            f"<response_1>{half}</response_1><response_2>{half}</response_2><response_3>{good}</response_3>",
            f"<response_1> </response_1><response_2>{good}</response_2>",  # an empty slot, slot 3 missing
            f"{good}\n---\n{half}",
        ],
        m=3,
    )
    h = [1.0, 0.0, 1.0, 0.0, 0.0]  # "the Cy" matches after the article is dropped
    assert vectors == [h, h, [1.0] * 5, ZERO5, [1.0] * 5, ZERO5, ZERO5, ZERO5, ZERO5]
    _, singles = pool("eureqa", EUREQA, [f"{half}\n---\n{good}", "Ada"], m=1)
    # each entity tag is read at its first occurrence anywhere in the text: A-C from the first chain, D, E from the
    # second
    assert singles == [[1.0, 0.0, 1.0, 1.0, 1.0], ZERO5]


TOOL = {"tool_calls_json": '[{"name": "weather", "parameters": {"city": "Oslo"}}]'}
CALL = '<tool_call>\n{"name": "weather", "parameters": {"city": "Oslo"}}\n</tool_call>'


def test_tool_prefill_before_single_answers_only():
    thought = f"<think>look it up</think>{CALL}"
    _, singles = pool("tool", TOOL, [CALL, thought, "   "], m=1, prefill="<think>\n\n</think>\n\n")
    assert singles == [[1.0] * 4, [1.0] * 4, ZERO4]  # the prefill gives the think block; a blank answer stays 0
    _, raw = pool("tool", TOOL, [CALL], m=1)
    assert raw == [[0.0, 1.0, 1.0, 1.0]]  # without it the format channel needs the model's own think block
    _, multi = pool(
        "tool",
        TOOL,
        [
            f"<response_1>{CALL}</response_1><response_2>{thought}</response_2><response_3>{thought}</response_3>",
            f"{thought}\n---\n{thought}",
            f"<response_1></response_1><response_3>{thought}</response_3>",
        ],
        m=3,
        prefill="<think>\n\n</think>\n\n",
    )
    assert multi == [
        [0.0, 1.0, 1.0, 1.0],
        [1.0] * 4,
        [1.0] * 4,  # slots are scored raw, a repeat kept
        ZERO4,
        ZERO4,
        ZERO4,  # no tags: three empty slots
        ZERO4,
        ZERO4,
        [1.0] * 4,
    ]  # an empty slot, a missing one


LCB = {
    "testtype": "stdin",
    "fn_name": None,
    "inputs": ["3\n1 2 3\n", "2\n4 6\n"],
    "outputs": ["6\n", "10\n"],
    "timeout_s": 5.0,
    "memory_mb": 512,
    "compare": "official",
}
SUM = "input()\nprint(sum(map(int, input().split())))"
SIX = "print(6)"


def test_lcb_eval_split_and_programs():
    fence = "```python\n{}\n```".format
    frame, vectors = pool(
        "lcb",
        LCB,
        [
            f"{fence(SUM)}\n---\n{fence(SUM)}",  # two python blocks, the same program twice; 3 missing
            f"{SIX}\n---\n{SUM} --- {SIX}",  # no blocks: every `---`, inline too
            f"```\n{SUM}\n```",  # a generic fence alone: its body
            f"```python\n```\n{fence(SIX)}",  # an empty block is an empty slot
        ],
        m=3,
    )
    assert vectors == [
        [1.0, 1.0],
        [1.0, 1.0],
        [0.0, 0.0],
        [1.0, 0.0],
        [1.0, 1.0],
        [1.0, 0.0],
        [1.0, 1.0],
        [0.0, 0.0],
        [0.0, 0.0],
        [0.0, 0.0],
        [1.0, 0.0],
        [0.0, 0.0],
    ]
    assert frame["correct"].tolist() == [True, True, False, False, True, False, True, False, False, False, False, False]
    assert frame["parsed"].tolist() == [True, True, False, True, True, True, True, False, False, False, True, False]
    _, singles = pool(
        "lcb",
        LCB,
        [
            f"Sum them:\n{fence(SUM)}\nor\n{fence(SIX)}",  # the first python block
            f"{fence(SIX)}",
            SUM,  # no fence: the whole text is the program
            f"```py\n{SUM}\n```",  # no python fence: the code ends at the first fence -> ""
            f"```python\n{SUM}",  # cut off before its closing fence: to the end
        ],
        m=1,
    )
    assert singles == [[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]


def test_lcb_code_reading_rules():
    from vpo_tasks.lcb_grading import eval_code_block, eval_program, eval_solutions

    assert eval_code_block("a ```python\nx = 1\n``` b ```python\ny\n```") == "x = 1"
    assert eval_code_block("```python\nx = 1") == "x = 1"
    assert eval_code_block("```cpp\nint x;\n```") == "cpp\nint x;"  # the info string stays
    assert eval_code_block("plain") == "plain"
    assert eval_solutions("```python\na\n```\n```python\na\n```", 3) == ["a", "a", ""]
    assert eval_solutions("a --- b", 2) == ["a", "b"] and eval_solutions("a --- b --- c", 2) == ["a", "b"]
    assert eval_solutions("only one", 3) == ["only one", "", ""]
    assert eval_program("x = 1\n```\nprose") == "x = 1" and eval_program("```python\nz\n```") == "z"


# ---- what a goal-conditioned model is shown
def rows(n):
    from vpo_tasks.maze import FORMAT_LINE

    return [
        {
            "prompt": [{"role": "user", "content": f"maze {i}\n- You have 6 steps.\n{FORMAT_LINE}"}],
            "data_source": "maze",
            "reward_model": {"ground_truth": MAZE},
            "extra_info": {"index": 10 + i},
        }
        for i in range(n)
    ]


def test_goal_weights_none_shows_the_prompt_as_written():
    plan = prompt_plan(
        resolve("maze"), rows(2), get_method("goal_cond"), m=3, budget=30, eval_seed=4, goal_weights="none", alpha=1.0
    )
    assert plan.prompts == [r["prompt"] for r in rows(2)] and plan.n == 30 and plan.weights == [None, None]


def test_goal_weights_per_problem_one_vector_shown_to_all_samples():
    from vpo.prompts import GOAL_HEADER, goal_weights

    plan = prompt_plan(
        resolve("maze"),
        rows(2),
        get_method("goal_cond"),
        m=3,
        budget=30,
        eval_seed=4,
        goal_weights="per_problem",
        alpha=0.5,
    )
    assert plan.problem == [0, 1] and plan.n == 30
    for i, (prompt, w) in enumerate(zip(plan.prompts, plan.weights)):
        assert w == pytest.approx(goal_weights(4, 10 + i, 4, 0.5).tolist())
        assert GOAL_HEADER in prompt[-1]["content"] and f"Reaching the exit (E): {w[0]:.2f}" in prompt[-1]["content"]
        assert "<route_" not in prompt[-1]["content"]  # one answer: no multi-answer format
    # a row without an index is its position
    bare = [{k: v for k, v in r.items() if k != "extra_info"} for r in rows(2)]
    plan = prompt_plan(
        resolve("maze"),
        bare,
        get_method("goal_cond"),
        m=3,
        budget=30,
        eval_seed=4,
        goal_weights="per_problem",
        alpha=0.5,
    )
    assert plan.weights[1] == pytest.approx(goal_weights(4, 1, 4, 0.5).tolist())


def test_goal_weights_per_chain_fresh_vector_per_group_of_m():
    plan = prompt_plan(
        resolve("maze"),
        rows(2),
        get_method("goal_cond"),
        m=3,
        budget=30,
        eval_seed=4,
        goal_weights="per_chain",
        alpha=1.0,
    )
    # 10 vectors per problem, problem-major, from one Dirichlet(1) stream seeded with the eval seed
    expected = np.random.default_rng(4).dirichlet(np.ones(4), size=20)
    assert plan.problem == [0] * 10 + [1] * 10 and plan.n == 3
    assert np.allclose(plan.weights, expected) and len({tuple(w) for w in plan.weights}) == 20
    assert plan.prompts[0][-1]["content"].startswith("maze 0") and plan.prompts[10][-1]["content"].startswith("maze 1")


@pytest.mark.parametrize("method, kind", [("random_weight", "single"), ("grpo", "single"), ("vpo", "multi")])
def test_other_methods_never_show_weights(method, kind):
    plan = prompt_plan(
        resolve("maze"), rows(2), get_method(method), m=3, budget=30, eval_seed=0, goal_weights="per_chain", alpha=1.0
    )
    assert plan.weights == [None, None] and plan.problem == [0, 1]
    assert plan.n == (10 if kind == "multi" else 30) and type(plan.n) is int
    assert ("<route_3>" in plan.prompts[0][-1]["content"]) == (kind == "multi")
    if kind == "single":
        assert plan.prompts == [r["prompt"] for r in rows(2)]  # the prompt as written


def test_unknown_goal_weight_mode_is_refused():
    with pytest.raises(ValueError, match="per_problem"):
        prompt_plan(
            resolve("maze"),
            rows(1),
            get_method("goal_cond"),
            m=3,
            budget=30,
            eval_seed=0,
            goal_weights="per_prompt",
            alpha=1.0,
        )


# ---- pool metrics of a candidate frame, against enumeration ----------------------------------------
def brute_pool(frame, names, budget, eval_seed):
    from itertools import combinations
    from types import SimpleNamespace

    from vpo.weights import sample_weights

    pools = [p.sort_values(["chain", "slot"]) for _, p in frame.groupby("problem")]
    pass_k, best_k, divs, ebm = [], [], [], []
    for p in pools:
        correct, scalars = p["correct"].tolist(), p["scalar"].tolist()
        subsets = [list(combinations(range(budget), k)) for k in range(1, budget + 1)]
        pass_k.append([np.mean([any(correct[i] for i in s) for s in subs]) for subs in subsets])
        best_k.append([np.mean([max(scalars[i] for i in s) for s in subs]) for subs in subsets])
        own = names[: int(p["k"].iloc[0])]
        v = p[own].to_numpy()
        divs.append(np.mean([np.abs(v[i] - v[j]).sum() for i, j in combinations(range(budget), 2)]))
        w = sample_weights(len(own), 100, rng=np.random.default_rng(eval_seed))
        ebm += [
            np.mean([max(float(np.dot(r, x)) for r in c[own].to_numpy()) for x in w]) for _, c in p.groupby("chain")
        ]
    return SimpleNamespace(
        pass_k=np.mean(pass_k, axis=0),
        best_k=np.mean(best_k, axis=0),
        diversity=np.mean(divs),
        ebm=np.mean(ebm),
        pools=pools,
    )


def test_pool_metrics_of_a_frame_with_two_k_by_enumeration():
    from types import SimpleNamespace

    from vpo.evaluate import pool_metrics

    names = ["a", "b", "c"]
    rng = np.random.default_rng(3)
    rows = []
    for problem, k in ((5, 2), (2, 3), (9, 2)):  # problems of 2 and 3 objectives, out of order
        for chain in range(2):
            for slot in range(2):
                vector = rng.integers(0, 3, size=3) / 2 * (np.arange(3) < k)
                rows.append(
                    {
                        "problem": problem,
                        "chain": chain,
                        "slot": slot,
                        **dict(zip(names, vector)),
                        "k": k,
                        "scalar": float(vector[:k].mean()),
                        "correct": bool(vector[:k].min() == 1.0),
                        "answer": "" if (problem, chain) == (2, 1) else "x",
                    }
                )
    frame = pd.DataFrame(rows).sample(frac=1.0, random_state=0)  # the frame's row order must not matter
    frame["parsed"] = frame["answer"].str.len() > 0
    got = pool_metrics(frame, SimpleNamespace(objective_names=names), budget=4, eval_seed=7)
    want = brute_pool(frame, names, 4, 7)
    assert got["n_problems"] == 3 and got["budget"] == 4
    np.testing.assert_allclose(got["pass_at_k"], want.pass_k, atol=1e-12)
    np.testing.assert_allclose(got["best_at_k"], want.best_k, atol=1e-12)
    assert got["diversity"] == pytest.approx(want.diversity, abs=1e-12)
    assert got["expected_best_of_m"] == pytest.approx(want.ebm, abs=1e-12)
    assert got["parse_failure_rate"] == pytest.approx(1 / 6)  # one chain of six parsed nothing
    assert got["objective_means"] == pytest.approx({n: frame[n].mean() for n in names})
    # best@k over one permutation per problem, problems in order, drawn from the eval seed's own stream
    perm_rng = np.random.default_rng([7, 2])
    perms = [np.maximum.accumulate(p["scalar"].to_numpy()[perm_rng.permutation(4)]) for p in want.pools]
    np.testing.assert_allclose(got["best_at_k_perm"], np.mean(perms, axis=0), atol=1e-12)
    with pytest.raises(ValueError, match="^problem 5 has 3 candidates, expected 4$"):
        pool_metrics(
            frame[~((frame["problem"] == 5) & (frame["chain"] == 1) & (frame["slot"] == 1))],
            SimpleNamespace(objective_names=names),
            budget=4,
            eval_seed=7,
        )


def test_the_candidate_frame_names_its_columns_and_problems():
    task = resolve("maze")
    indexed = {
        "prompt": [{"role": "user", "content": "q17"}],
        "reward_model": {"ground_truth": MAZE},
        "extra_info": {"index": 17},
    }
    bare = {"prompt": [{"role": "user", "content": "q?"}], "reward_model": {"ground_truth": MAZE}}
    plan = PromptPlan([indexed["prompt"], bare["prompt"]], [0, 1], [[0.5, 0.5, 0.0, 0.0], None], 1)
    frame = candidate_frame(
        task, [indexed, bare], plan, [[f"<answer>{TOP}</answer>"], ["x"]], 1, single_answer_prefill=""
    )
    assert list(frame.columns) == [
        "problem",
        "prompt",
        "weights",
        "chain",
        "slot",
        "text",
        "response",
        "answer",
        *task.objective_names,
        "k",
        "scalar",
        "correct",
        "parsed",
    ]
    first = frame.iloc[0]
    assert first["problem"] == 17 and frame["problem"].iloc[1] == 1  # the row's index, else its position
    assert (first["prompt"], first["text"], first["response"]) == (
        "q17",
        f"<answer>{TOP}</answer>",
        f"<answer>{TOP}</answer>",
    )
    assert list(first["weights"]) == [0.5, 0.5, 0.0, 0.0] and frame["weights"].iloc[1] is None


def test_a_one_character_answer_is_parsed():
    from vpo.task import Task

    class Letters(Task):  # an answer is the stripped text; it scores 1 when it is "a"
        name, objectives, scalar_weights, default_m, single_format_line = "letters", (("a", "Is a"),), (1.0,), 2, ""

        def split_answers(self, text, m):
            return [text.strip()] if text.strip() else []

        def score_answer(self, answer, ground_truth):
            return [float(answer == "a")]

    row = {"prompt": [{"role": "user", "content": "q"}], "reward_model": {"ground_truth": {}}}
    frame = candidate_frame(
        Letters(), [row], PromptPlan([row["prompt"]], [0], [None], 3), [["a", " b ", "  "]], 1, single_answer_prefill=""
    )
    assert frame["answer"].tolist() == ["a", "b", ""] and frame["parsed"].tolist() == [True, True, False]


def test_the_prefill_precedes_only_a_nonempty_single_answer():
    # the prefill is the start of the answer the model was made to continue; an empty response stays empty,
    # and a multi-answer chain is read as written
    _, single = pool("maze", MAZE, [" DOWN DOWN", "", "   "], m=1, prefill="RIGHT RIGHT")
    assert single == [[1.0, 1.0, 0.0, 1.0], ZERO4, ZERO4]
    _, multi = pool("maze", MAZE, [LEFT], m=3, prefill="RIGHT RIGHT ")
    assert multi == [V_LEFT, ZERO4, ZERO4]
    _, whole = pool("maze", MAZE, ["", TOP], m=1, prefill=TOP + " ")  # a prefill that alone reaches the exit
    assert whole == [ZERO4, V_TOP]


@pytest.mark.parametrize("broken", ["answer_slots", "split_answers"])
def test_a_plugin_parser_that_raises_in_evaluation_is_named_as_in_training(broken):
    """Training names the task whose parser raised (vpo.task.task_code); evaluation once let the bare
    exception through."""
    from vpo.task import Task, TaskCodeError

    class Fragile(Task):
        name, objectives, scalar_weights, default_m, single_format_line = "fragile", (("a", "Is a"),), (1.0,), 2, ""

        def split_answers(self, text, m):
            if broken == "split_answers":
                raise IndexError("no answer tag")
            return [text.strip()]

        def answer_slots(self, text, m):
            if broken == "answer_slots":
                raise IndexError("no answer tag")
            return [text.strip()] * m

        def score_answer(self, answer, ground_truth):
            return [1.0]

    row = {"prompt": [{"role": "user", "content": "q"}], "reward_model": {"ground_truth": {}}}
    m = 2 if broken == "answer_slots" else 1
    with pytest.raises(TaskCodeError, match=r"task 'fragile' \(.*Fragile\) raised IndexError while reading"):
        candidate_frame(
            Fragile(), [row], PromptPlan([row["prompt"]], [0], [None], 1), [["a"]], m, single_answer_prefill=""
        )


# ---- "parsed" is the task's parser in training and evaluation: plugins whose answers sit in tags ----
def _colours_task():
    """The shipped plugin example (examples/vpo-colours-task), imported from its folder."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "vpo-colours-task" / "vpo_colours" / "__init__.py"
    import sys

    spec = importlib.util.spec_from_file_location("vpo_colours_example", path)
    module = sys.modules.setdefault("vpo_colours_example", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module.ColoursTask()


class _BracketTask(Task):  # a second tagged plugin
    """Answers as [[...]] in one response, [[1: ...]] .. [[m: ...]] in a multi-answer one; k = 2."""

    name, label, objectives, scalar_weights, default_m = "brackets", "Brackets", (("a", "A"), ("b", "B")), (0.5, 0.5), 2

    def split_answers(self, text, m):
        import re

        if m == 1:
            found = re.findall(r"\[\[(?!\d+:)(.*?)\]\]", str(text))
            return [found[0].strip()] if found and found[0].strip() else []
        return list(dict.fromkeys(a for a in (s.strip() for s in self.answer_slots(text, m)) if a))

    def answer_slots(self, text, m):
        import re

        found = {int(i): a.strip() for i, a in re.findall(r"\[\[(\d+): (.*?)\]\]", str(text))}
        return [found.get(i, "") for i in range(1, m + 1)]

    def score_answer(self, answer, ground_truth):
        return [float("a" in answer), float("b" in answer)]


@pytest.mark.parametrize("make", [_colours_task, _BracketTask], ids=["colours", "brackets"])
def test_a_tagged_plugins_candidates_parse_as_training_counts_its_answers(make):
    """The candidates of responses the task's parser reads are parsed in evaluation (a multi-answer slot
    holds its answer without the response's tags); a response with no answer is not; and the share of
    chains with a parsed candidate is 1 - training's parse-failure rate on the same responses."""
    task = make()
    m = 2
    if task.name == "colours":
        truth = {"colours": ["red", "blue", "green"]}
        good = ["<answer_1>red</answer_1> <answer_2>blue green</answer_2>", "<answer_2>green</answer_2>"]
        single_good = "<answer>red blue</answer>"
    else:
        truth = {}
        good = ["[[1: a]] [[2: b]]", "[[2: ab]]"]
        single_good = "[[a b]]"
    responses = good + ["I cannot answer."]
    row = {
        "prompt": [{"role": "user", "content": "q"}],
        "reward_model": {"ground_truth": truth},
        "extra_info": {"index": 0},
    }
    plan = PromptPlan([row["prompt"]], [0], [None], len(responses))
    frame = candidate_frame(task, [row], plan, [responses], m, single_answer_prefill="")
    assert frame["parsed"].tolist() == [True, True, False, True, False, False]
    parsed_chains = frame.groupby("chain")["parsed"].any().mean()
    trained = [task.score_response(text, truth, m)[1] for text in responses]  # distinct answers, as the reward counts
    assert parsed_chains == np.mean([count > 0 for count in trained]) == pytest.approx(2 / 3)
    single = candidate_frame(
        task, [row], PromptPlan([row["prompt"]], [0], [None], 2), [[single_good, "no"]], 1, single_answer_prefill=""
    )
    assert single["parsed"].tolist() == [True, False]
