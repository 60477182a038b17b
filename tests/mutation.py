"""Mutation testing of the engine core: `make mutation` (or `python tests/mutation.py [module ...]`).

For each module below, mutmut (3.8.1, the dev extra) changes the module's code one small edit at a time
(an operator, a constant, a default, a removed call) and runs the module's own tests against each
mutant; a mutant those tests do not fail "survives". Each module runs in a scratch copy of the tracked
files with its own mutmut settings (mutmut reads them from pyproject.toml), so the checkout is never
touched. Prints one line per module: mutants, killed (a test failed or timed out), survived, no test
reached it, marked equivalent (`EQUIVALENT` below: skipped by mutmut), and the score: killed over
killed + survived + untested. `--list` prints the surviving mutants' names; `mutmut show <name>`, run in
the scratch copy it prints, shows one.

docs/testing.md has the table and how to read a survivor.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MUTMUT = Path(sys.executable).parent / "mutmut"

# module -> the tests that hold it (its own test files, kept short: every mutant reruns them)
MODULES = {
    "vpo/vpo_scores.py": ["tests/test_advantage.py"],
    "vpo/advantage.py": ["tests/test_advantage.py", "tests/test_set_rl.py"],
    "vpo/set_rl.py": ["tests/test_set_rl.py"],
    "vpo/method_advantage.py": ["tests/test_advantage.py", "tests/test_set_rl.py", "tests/test_strategy_judge.py"],
    "vpo/weights.py": ["tests/test_weights.py"],
    "vpo/metrics.py": ["tests/test_metrics.py"],
    "vpo/rollouts.py": ["tests/test_rollouts.py"],
    # the property tests (hundreds of generated batches each) test the tasks' parsers, not the dispatcher
    "vpo/reward.py": ["tests/test_reward.py", "-k", "not arbitrary_text and not move_sequences"],
    "vpo/local/rl.py": ["tests/test_local_rl.py"],
    "vpo/local/adamw.py": ["tests/test_adamw.py"],
    "vpo/evaluate.py": ["tests/test_eval_candidates.py"],
    "vpo_tasks/maze.py": ["tests/test_maze.py"],
    # each task's "never raises" property test scores thousands of generated texts (25 s a run), and the
    # hub tests wait on a refused connection: deterministic tests judge the mutants
    "vpo_tasks/musique.py": ["tests/test_musique.py", "-k", "not never_raises and not unreachable_hub"],
    "vpo_tasks/eureqa.py": ["tests/test_eureqa.py", "-k", "not never_raises and not unreachable_hub"],
    "vpo_tasks/tool.py": ["tests/test_tool.py", "-k", "not never_raises"],
    "vpo_tasks/lcb_grading.py": ["tests/test_lcb.py", "tests/test_eval_candidates.py", "-k", "not infinite_loop"],
    "vpo_tasks/response_slots.py": ["tests/test_response_slots.py"],
}
# Modules of which only some functions are the engine core (evaluation's candidates, each task's parser
# and scorer; not data download, prompts or demonstrations): the score counts only their mutants.
ONLY_FUNCTIONS = {
    "vpo/evaluate.py": ("prompt_plan", "candidate_frame", "pool_metrics"),
    "vpo_tasks/maze.py": (
        "parse_grid",
        "simulate",
        "score_moves",
        "_block",
        "_all_blocks",
        "parse_moves",
        "route_slots",
        "distinct_routes",
        "MazeTask.is_correct",
        "MazeTask.split_answers",
        "MazeTask.parses",
        "MazeTask.answer_slots",
        "MazeTask.score_answer",
    ),
    "vpo_tasks/musique.py": (
        "normalize",
        "token_f1",
        "best_token_f1",
        "cited_indices",
        "score_answer",
        "MusiqueTask.is_correct",
        "MusiqueTask.parses",
        "MusiqueTask.score_answer",
    ),
    "vpo_tasks/eureqa.py": (
        "normalize_entity",
        "parse_entities",
        "score_answer",
        "EureqaTask.parses",
        "EureqaTask.score_answer",
    ),
    "vpo_tasks/tool.py": (
        "_objects",
        "_object_stream",
        "parse_calls",
        "parse_response",
        "normalize",
        "multiset_f1",
        "set_f1",
        "_number",
        "value_match",
        "align",
        "score_calls",
        "gold_calls",
        "score_answer",
        "ToolTask.parses",
        "ToolTask.score_answer",
    ),
    "vpo_tasks/lcb_grading.py": (
        "extract_code",
        "has_code_block",
        "split_solutions",
        "_fenced",
        "eval_code_block",
        "eval_solutions",
        "eval_program",
        "fingerprint",
        "compiles",
        "_decimals",
        "stdout_matches",
        "functional_program",
        "functional_result",
        "programs_for_tests",
        "passed",
        "score_programs",
    ),
}


def scope_patterns(module: str) -> list[str]:
    """mutmut's names of the mutants a module's score counts, as patterns (none: every mutant): a
    function's read <package>.<module>.x_<function>__mutmut_<n>, a method's xǁ<Class>ǁ<method>."""
    dotted = module.removesuffix(".py").replace("/", ".")
    return [
        f"{dotted}.x{'ǁ' if '.' in name else '_'}{name.replace('.', 'ǁ')}__mutmut_*"
        for name in ONLY_FUNCTIONS.get(module, ())
    ]


# Mutants known to be equivalent, marked `# pragma: no mutate` in the scratch copy only, so the modules read
# as plain code: module -> (a fragment of each such line, found exactly once, and why its mutants change
# nothing). A fragment the module no longer holds fails the run.
EQUIVALENT = {
    "vpo/vpo_scores.py": [
        ("rows = np.fromiter((m.shape[0]", "dtype and count say what numpy infers from these ints"),
        ("cols = np.fromiter((m.shape[1]", "dtype and count say what numpy infers from these ints"),
        ("k_hi = np.full(n_groups, -1, dtype=np.int64)", "numpy's own dtype; any negative start marks no rows"),
        ("k_lo = np.full(n_groups, np.iinfo(np.int64).max", "numpy's own dtype for these ints"),
        ("w_stack = np.stack([np.asarray(weights[ids[g]]", "the matmul with the float64 scores casts them anyway"),
        ("group_first = np.full(len(gsel), len(stacked)", "numpy's dtype for an int"),
        ('sampler: str = "naive",', 'sampler names are read case-blind: "NAIVE" is the same'),
    ],
    "vpo/method_advantage.py": [
        ("width = max((m.shape[1] for m in mats), default=0)", "0 or 1 zero columns give gdpo's same zero advantages"),
    ],
    "vpo/weights.py": [
        ("if alpha < _SMALL_ALPHA:", "both methods draw Dirichlet(alpha); the switch point is numerical"),
        ("u = np.clip(_sobol_uniforms(", "u is 0 or 1 only by rounding, below 2**-50: any clip that small is the same"),
    ],
    "vpo/evaluate.py": [
        ('prompts = [row_prompt(r, mode="single", m=1', "row_prompt reads m only for the multi-answer prompt"),
        ('row_prompt(rows[p], mode="goal", m=1', "row_prompt reads m only for the multi-answer prompt"),
    ],
    "vpo/local/rl.py": [
        ("negative = advantages < 0", "`<= 0` is the same: at an advantage of 0 both branches are 0"),
        ("log_ratio = (ref_logp - logp).clamp(max=20.0)", "any bound above 2.62 gives the same values"),
        ('adam = {"betas": (0.9, 0.999), "eps": 1e-8}', "torch's defaults, written out as veRL's"),
    ],
    "vpo_tasks/lcb_grading.py": [
        ("workers=workers or default_workers()", "how many programs run at once changes no result"),
    ],
    "vpo_tasks/tool.py": [
        ('items = json.loads("[" + OBJECT_BREAK.sub(', "when the fast path fails, the object stream reads the same"),
    ],
}


def mark_equivalent(path: Path, module: str) -> None:
    """Append `# pragma: no mutate` to the lines of `module` (in the scratch copy `path`) that EQUIVALENT names."""
    lines = path.read_text().split("\n")
    for fragment, _why in EQUIVALENT.get(module, ()):
        found = [i for i, line in enumerate(lines) if fragment in line]
        if len(found) != 1:
            raise SystemExit(f"tests/mutation.py EQUIVALENT: {fragment!r} is on {len(found)} lines of {module}, not 1")
        lines[found[0]] += "  # pragma: no mutate"
    path.write_text("\n".join(lines))


# mutmut's exit codes per mutant, grouped as the table counts them (mutmut/stats.py)
KILLED = {1, 3, 36, 24, -24, 152, 255, -11, -9}
SURVIVED, UNTESTED, SKIPPED = {0}, {5, 33}, {34}
# what the tests read besides the package under mutation
ALSO_COPY = ["config.yaml", "vpo", "vpo_tasks", "verl", "docs", "workflow", "rules", "locks", "envs", "profiles"]


def scratch_copy(module: str, tests: list[str]) -> Path:
    """A copy of the tracked files with mutmut's settings for `module` appended to pyproject.toml."""
    root = Path(tempfile.mkdtemp(prefix="vpo-mutation-"))
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    mark_equivalent(root / module, module)
    settings = {
        "source_paths": [module.split("/")[0]],
        "only_mutate": [module],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-q", "-p", "no:xdist", "-p", "no:cacheprovider"],
        # torch is not fork-safe once its thread pool has started: fork from a clean server process
        "process_isolation": "forkserver",
        "also_copy": [name for name in ALSO_COPY if not module.startswith(name + "/")],
    }
    with open(root / "pyproject.toml", "a") as fh:
        fh.write("\n[tool.mutmut]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items()))
    return root


def run_module(module: str, tests: list[str], workers: int, keep: bool) -> dict:
    root = scratch_copy(module, tests)
    start = time.monotonic()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    patterns = scope_patterns(module)
    done = subprocess.run(
        [str(MUTMUT), "run", "--max-children", str(workers), *patterns],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - start
    meta = root / "mutants" / (module + ".meta")
    if done.returncode != 0 or not meta.is_file():
        raise SystemExit(f"mutmut failed on {module} (in {root}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    if patterns:  # the meta file lists every mutant of the module; the unrun ones are out of scope
        codes = {key: c for key, c in codes.items() if any(fnmatch.fnmatchcase(key, p) for p in patterns)}
    counts = {"killed": 0, "survived": 0, "untested": 0, "equivalent": 0, "other": 0}
    counts.update(
        Counter(
            (
                "killed"
                if c in KILLED
                else "survived"
                if c in SURVIVED
                else "untested"
                if c in UNTESTED
                else "equivalent"
                if c in SKIPPED
                else "other"
            )
            for c in codes.values()
        )
    )
    judged = counts["killed"] + counts["survived"] + counts["untested"]
    result = {
        "module": module,
        "mutants": len(codes),
        **counts,
        "seconds": round(seconds),
        "score": counts["killed"] / judged if judged else 1.0,
        "survivors": sorted(k for k, c in codes.items() if c in SURVIVED | UNTESTED),
        "scratch": str(root),
    }
    if not keep:
        shutil.rmtree(root)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: every one of MODULES)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="mutants tested at once")
    parser.add_argument("--list", action="store_true", help="print the surviving mutants and keep the copies")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"not in tests/mutation.py's MODULES: {unknown}; choose from {sorted(MODULES)}")
    print(
        f"{'module':28} {'mutants':>7} {'killed':>6} {'survived':>8} {'untested':>8} {'equiv.':>6} "
        f"{'score':>6} {'s':>5}",
        flush=True,
    )
    for module in args.modules or MODULES:
        r = run_module(module, MODULES[module], args.workers, keep=args.list)
        print(
            f"{module:28} {r['mutants']:7} {r['killed']:6} {r['survived']:8} {r['untested']:8} "
            f"{r['equivalent']:6} {r['score']:6.1%} {r['seconds']:5}",
            flush=True,
        )
        if args.list:
            print(f"  scratch copy: {r['scratch']}")
            for name in r["survivors"]:
                print(f"  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
