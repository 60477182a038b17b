"""config.yaml, its schema and the loader: presets, overrides and errors that name the key."""

import copy
from pathlib import Path

import pytest
import yaml

from vpo.config import (
    ConfigError,
    cell_settings,
    deep_merge,
    load_config,
    method_settings,
    resolve_config,
    settings_digest,
    task_settings,
    write_config,
)

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config.yaml"
ALL_METHODS = ["grpo", "gdpo", "maxrl", "max_at_k", "multi_rlvr", "vpo", "vpo_single", "goal_cond", "random_weight"]


@pytest.fixture
def raw():
    return yaml.safe_load(CONFIG.read_text())


def test_default_is_the_cpu_preset():
    cfg = load_config(CONFIG)
    assert cfg["preset"] == "cpu" and cfg["backend"] == "local" and cfg["tasks"] == ["maze"]
    # the preset merges into the task's data settings without dropping the other keys
    assert cfg["task_settings"]["maze"]["data"]["test_size"] == 24
    assert cfg["task_settings"]["maze"]["data"]["score_mode"] == "convex_bonus"


def test_paper_preset_is_the_full_grid():
    cfg = load_config(CONFIG, preset="paper")
    assert cfg["backend"] == "verl" and cfg["methods"] == ALL_METHODS
    assert cfg["tasks"] == ["maze", "musique", "eureqa", "tool", "lcb"] and cfg["seeds"] == [0, 1, 2]
    # paper section 3 / 6.3: m = 3 throughout, 4 eval seeds on EUREQA and ToolRL, 30 candidates; the
    # authors' evaluation seeds (docs/evaluation.md): 0 for maze and LiveCodeBench, 42 for the rest
    assert {t: s["m"] for t, s in cfg["task_settings"].items()} == dict.fromkeys(cfg["tasks"], 3)
    seeds = {t: task_settings(cfg, t)["eval"]["seeds"] for t in cfg["tasks"]}
    assert seeds == {"maze": [0], "musique": [42], "eureqa": [42, 43, 44, 45], "tool": [42, 43, 44, 45], "lcb": [0]}
    assert task_settings(cfg, "tool")["eval"]["top_p"] == 0.95
    assert all(s["eval"]["budget"] == 30 for s in cfg["task_settings"].values())
    assert method_settings(cfg, "vpo") == {"alpha": 1.0, "sampler": "naive", "n_weights": 100}


def test_every_preset_resolves_and_resolving_twice_changes_nothing():
    for preset in ("cpu", "ci", "paper"):
        cfg = load_config(CONFIG, preset=preset)
        assert resolve_config(cfg) == cfg


def test_a_snapshot_reads_back_as_the_config_it_was_written_from(tmp_path):
    snapshot = tmp_path / "resolved.yaml"
    cfg = load_config(CONFIG, preset="ci")
    write_config(cfg, snapshot)
    assert load_config(snapshot) == cfg  # its own `preset` key selects the preset again
    assert load_config(snapshot)["methods"] == ["grpo", "vpo"]
    assert write_config(load_config(snapshot), snapshot) is False  # identical content is not rewritten


def test_overrides_merge_last(raw):
    cfg = resolve_config(raw, "cpu", {"task_settings": {"maze": {"m": 5}}, "seeds": [7]})
    assert cfg["seeds"] == [7] and task_settings(cfg, "maze")["m"] == 5
    assert task_settings(cfg, "maze")["eval"]["budget"] == 30


@pytest.mark.parametrize(
    "mutate, key, words",
    [
        (lambda c: c["methods"].append("dpo"), "methods", "'dpo' is neither a method (grpo, gdpo"),
        (lambda c: c.__setitem__("seeds", [0, -1]), "seeds[1]", "less than the minimum of 0"),
        (lambda c: c["tasks"].append("chess"), "tasks", "'chess' has no settings; add task_settings.chess"),
        (lambda c: c["task_settings"]["maze"].pop("m"), "task_settings.maze", "'m' is a required property"),
        (
            lambda c: c["task_settings"]["maze"]["eval"].__setitem__("budget", "thirty"),
            "task_settings.maze.eval.budget",
            "is not of type 'integer'",
        ),
        (lambda c: c.__setitem__("seed", [0]), "<top level>", "('seed' was unexpected)"),
        (
            lambda c: c["method_settings"]["vpo"].__setitem__("sampler", "halton"),
            "method_settings.vpo.sampler",
            "'halton' is not one of",
        ),
        (lambda c: c["presets"]["paper"].__setitem__("method", ["vpo"]), "presets.paper", "('method' was unexpected)"),
        # every key is checked at parse time, also those only one trainer or estimator reads
        (
            lambda c: c["method_settings"]["vpo"].__setitem__("alpah", 0.5),
            "method_settings.vpo",
            "('alpah' was unexpected)",
        ),
        (
            lambda c: c["method_settings"]["grpo"].__setitem__("alpha", 0.5),
            "method_settings.grpo.alpha",
            "grpo does not take 'alpha'",
        ),
        (lambda c: c["local_trainer"].__setitem__("lrr", 1e-3), "local_trainer", "('lrr' was unexpected)"),
        (lambda c: c["local_trainer"].pop("steps"), "local_trainer", "'steps' is a required property"),
        (lambda c: c["local_trainer"].__setitem__("steps", 2.5), "local_trainer.steps", "is not of type 'integer'"),
        (
            lambda c: c["local_trainer"].__setitem__("lr", -1.0),
            "local_trainer.lr",
            "-1.0 is less than or equal to the minimum of 0",
        ),
        (
            lambda c: c["local_trainer"].__setitem__("top_p", 1.5),
            "local_trainer.top_p",
            "1.5 is greater than the maximum of 1",
        ),
        (
            lambda c: c["local_trainer"].__setitem__("rollouts_per_prompt", 1),
            "local_trainer.rollouts_per_prompt",
            "1 is less than the minimum of 2",
        ),
        (
            lambda c: c["task_settings"]["maze"]["eval"].__setitem__("budget", 31),
            "task_settings.maze.eval.budget",
            "31 candidates are not whole groups of m = 3 (multi_rlvr, vpo, vpo_alpha_0.1",
        ),
        # MuSiQue shows goal_cond a fresh weight vector per m samples, so the budget must hold whole groups
        (
            lambda c: (
                c.__setitem__("methods", ["grpo", "goal_cond"]),
                c["task_settings"]["musique"]["eval"].__setitem__("budget", 31),
            ),
            "task_settings.musique.eval.budget",
            "31 candidates are not whole groups of m = 3 (goal_cond fill",
        ),
        (
            lambda c: c["task_settings"]["musique"]["eval"].__setitem__("goal_weights", "per_row"),
            "task_settings.musique.eval.goal_weights",
            "'per_row' is not one of ['none', 'per_chain', 'per_problem']",
        ),
        (
            lambda c: c["evolve"].__setitem__("select_methods", ["grpo", "vpo", "maxrl2"]),
            "evolve.select_methods",
            "['maxrl2'] are not in methods",
        ),
        (
            lambda c: c.__setitem__("methods", ["grpo", "max_at_k"]),
            "evolve.select_methods",
            "['vpo'] are not in methods",
        ),
        (
            lambda c: c["task_settings"]["tool"]["eval"].__setitem__("max_new_tokens", 1024),
            "task_settings.tool.eval.max_new_tokens",
            "1024 is not of type 'object'",
        ),
        (
            lambda c: c["method_settings"]["max_at_k"].__setitem__("k", 8),
            "method_settings.max_at_k.k",
            "a subset of 8 does not fit a group of verl.batch_presets.up_to_4b.rollout_n = 8",
        ),
        (
            lambda c: (c["tasks"].append("chess"), c["task_settings"].__setitem__("chess", c["task_settings"]["maze"])),
            "tasks",
            "no installed task plugin is called 'chess'",
        ),
        (
            lambda c: c["method_settings"]["goal_cond"].pop("alpha"),
            "method_settings.goal_cond.alpha",
            "goal_cond draws Dirichlet weights; set their alpha",
        ),
        (
            lambda c: c["method_settings"]["grpo"].__setitem__("alpha", 2.0),
            "method_settings.grpo.alpha",
            "grpo does not take 'alpha'; it takes eps, norm_by_std",
        ),
        (
            lambda c: c["task_settings"]["lcb"]["data"]["deepcoder"].__setitem__("test", "apps"),
            "task_settings.lcb.data",
            "'apps' is not one of the dataset's configs",
        ),
    ],
)
def test_malformed_configs_name_the_key(raw, mutate, key, words):
    bad = copy.deepcopy(raw)
    mutate(bad)
    with pytest.raises(ConfigError) as err:
        resolve_config(bad, "paper")
    assert key in str(err.value) and words in str(err.value)


def test_errors_in_a_preset_are_caught_when_it_is_applied(raw):
    bad = copy.deepcopy(raw)
    bad["presets"]["cpu"]["task_settings"]["maze"]["eval"]["seeds"] = [-2]
    resolve_config(bad, "paper")  # the paper preset does not use it
    with pytest.raises(ConfigError, match=r"after applying preset 'cpu'.*\n.*task_settings.maze.eval.seeds\[0\]"):
        resolve_config(bad, "cpu")


def test_unknown_preset_and_budget_too_small(raw):
    with pytest.raises(ConfigError, match="preset: 'gpu' is not defined in presets.*ci, cpu, paper"):
        resolve_config(raw, "gpu")
    with pytest.raises(ConfigError, match=r"report.best_at: 30 exceeds task_settings.maze.eval.budget \(6\)"):
        resolve_config(raw, "ci", {"report": {"best_at": 30}})
    with pytest.raises(ConfigError, match="task_settings.maze.gpus: backend verl"):
        resolve_config(raw, "cpu", {"backend": "verl"})


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("methods: [grpo\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")


def test_deep_merge_and_digests():
    assert deep_merge({"a": {"b": 1, "c": [1]}}, {"a": {"c": [2]}}) == {"a": {"b": 1, "c": [2]}}
    assert settings_digest({"x": 1, "y": 2}) == settings_digest({"y": 2, "x": 1})
    cfg = load_config(CONFIG, preset="paper")
    vpo, grpo = cell_settings(cfg, "maze", "vpo"), cell_settings(cfg, "maze", "grpo")
    assert settings_digest(vpo) != settings_digest(grpo)
    changed = resolve_config(cfg, overrides={"task_settings": {"tool": {"epochs": 3}}})
    assert settings_digest(cell_settings(changed, "maze", "vpo")) == settings_digest(vpo)
    # evaluation settings re-evaluate a cell but never retrain it
    changed = resolve_config(cfg, overrides={"task_settings": {"maze": {"eval": {"max_new_tokens": {"single": 7}}}}})
    assert settings_digest(cell_settings(changed, "maze", "vpo")) == settings_digest(vpo)
    changed = resolve_config(cfg, overrides={"task_settings": {"maze": {"m": 5}}})  # 30 = 6 chains of 5
    assert settings_digest(cell_settings(changed, "maze", "vpo")) != settings_digest(vpo)


def test_relative_data_paths_are_made_absolute_against_the_project(tmp_path):
    from vpo.config import absolute_data_paths

    cfg = load_config(CONFIG, preset="ci")
    assert cfg["task_settings"]["musique"]["data"]["path"] == "tests/fixtures/musique"
    fixed = absolute_data_paths(cfg, CONFIG.parent)
    assert fixed["task_settings"]["musique"]["data"]["path"] == str(CONFIG.parent / "tests" / "fixtures" / "musique")
    assert (Path(fixed["task_settings"]["musique"]["data"]["path"]) / "musique_ans_v1.0_dev.jsonl").is_file()
    assert cfg["task_settings"]["musique"]["data"]["path"] == "tests/fixtures/musique"  # the input is not changed
    assert absolute_data_paths(fixed, tmp_path) == fixed  # absolute paths stay
    assert resolve_config(fixed, "ci") == fixed  # a job re-resolving the snapshot keeps them


def test_scale_note_names_preset_and_scale():
    from vpo.config import scale_note

    cpu = load_config(CONFIG)
    steps, side = cpu["local_trainer"]["steps"], cpu["task_settings"]["maze"]["data"]["size"]
    assert scale_note(cpu) == (
        f"cpu preset: 2-layer width-64 model trained on CPU, {steps} RL steps of 8 x 8 "
        f"rollouts, maze {side}x{side}, 5 seeds"
    )
    assert scale_note(load_config(CONFIG, preset="ci")).endswith("rollouts, maze 9x9, 1 seed")
    assert scale_note(load_config(CONFIG, preset="verl_cpu")) == (
        "verl_cpu preset: 2-layer width-64 model trained by veRL on CPU, 4 x 8 rollouts per step, maze 7x7, 1 seed"
    )
    paper = scale_note(load_config(CONFIG, preset="paper"))
    assert paper.startswith("paper preset: veRL on ") and "Qwen/Qwen3-4B" in paper


def test_command_line_numbers_in_lists_are_numbers(raw):
    from vpo.config import numbers_in_lists

    cfg = resolve_config({**raw, "seeds": ["0", "2"]}, "paper")  # what `--config seeds=[0,2]` hands over
    assert cfg["seeds"] == [0, 2]
    assert numbers_in_lists({"a": ["1.5", "x1", "-3", "1e-3", "2025-02-01"]}) == {
        "a": [1.5, "x1", -3, 1e-3, "2025-02-01"]
    }
    # nested mappings from --config arrive as text too
    assert numbers_in_lists(
        {"v": {"m": "2", "settings": {"alpha": "0.3", "on": "true", "path": "null", "d": "2025-02-01"}}}
    ) == {"v": {"m": 2, "settings": {"alpha": 0.3, "on": True, "path": None, "d": "2025-02-01"}}}


def test_command_line_values_win_over_the_preset_and_survive_a_reread(raw):
    from vpo.overrides import preset_conflicts, user_overrides

    project = copy.deepcopy(raw)
    raw["seeds"] = ["0"]  # what `snakemake --config seeds=[0]` hands over
    raw["task_settings"]["maze"]["eval"]["temperature"] = 0.5
    overrides = user_overrides(raw, project)
    assert overrides == {"seeds": [0], "task_settings": {"maze": {"eval": {"temperature": 0.5}}}}
    assert preset_conflicts(raw, overrides, "cpu") == ["seeds"]  # cpu sets seeds; it sets no temperature
    cfg = resolve_config(raw, "cpu", overrides)
    assert cfg["seeds"] == [0] and cfg["task_settings"]["maze"]["eval"]["temperature"] == 0.5
    assert cfg["task_settings"]["maze"]["data"]["train_size"] == 256  # the rest of the preset still applies
    assert resolve_config(cfg) == cfg  # a job re-reading the snapshot sees the same config
    assert user_overrides(project, project) == {}
    # `--config seeds=[0,1,2]` repeats config.yaml's seeds: still the user's, so it wins over cpu's five
    repeated = user_overrides(project, project, {"seeds": ["0", "1", "2"], "preset": "cpu"})
    assert repeated == {"seeds": [0, 1, 2]}
    assert resolve_config(project, "cpu", repeated)["seeds"] == [0, 1, 2]


def test_every_numeric_local_trainer_setting_has_a_range():
    import dataclasses

    from vpo.settings import LIMITS, LocalTrainerSettings

    # max_new_tokens: a mapping of numbers (one per prompt kind), whose values have the range
    numeric = {f.name for f in dataclasses.fields(LocalTrainerSettings) if str(f.type) in ("int", "float", "dict")}
    assert numeric == set(LIMITS), (
        f"no range for {sorted(numeric - set(LIMITS))}; stale {sorted(set(LIMITS) - numeric)}"
    )


def test_the_verl_block_and_its_typed_settings_name_the_same_keys(raw):
    import dataclasses

    from vpo.config import verl_settings
    from vpo.settings import BatchPreset, VerlSettings

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    block = schema["properties"]["verl"]
    assert set(block["required"]) == set(block["properties"]) == {f.name for f in dataclasses.fields(VerlSettings)}
    sizes = block["properties"]["batch_presets"]["additionalProperties"]["required"]
    assert set(sizes) == {f.name for f in dataclasses.fields(BatchPreset)}
    settings = verl_settings(resolve_config(raw, "verl_cpu"))
    assert settings.device == "cpu" and settings.batch_presets["cpu_tiny"].rollout_n == 8 and settings.gpus is None
    with pytest.raises(ValueError, match=r"verl: unknown key\(s\) \['gpu'\]"):
        VerlSettings.from_dict({**raw["verl"], "gpu": 2})


def test_a_grid_of_other_tasks_keeps_the_presets_ablations_on_its_own_tasks(raw, capsys):
    """`--config tasks=[musique]` under the ci preset (ablations on maze): the ablations skip maze with
    a note instead of stopping the plan; a user's own ablations.tasks outside the grid still stops it."""
    cfg = resolve_config(raw, "ci", {"tasks": ["musique"]})
    assert cfg["tasks"] == ["musique"] and cfg["ablations"]["tasks"] == []
    assert "the ablations skip ['maze'], not in tasks ['musique']" in capsys.readouterr().err
    assert resolve_config(cfg) == cfg  # a job reading the snapshot resolves the same config
    kept = resolve_config(raw, "ci", {"tasks": ["maze", "musique"]})
    assert kept["ablations"]["tasks"] == ["maze"] and capsys.readouterr().err == ""
    with pytest.raises(ConfigError, match="ablations.tasks: 'maze' is not in tasks"):
        resolve_config(raw, "ci", {"tasks": ["musique"], "ablations": {"tasks": ["maze"]}})


def test_the_cpu_backends_do_not_need_the_settings_only_verl_reads(raw):
    """A task's model, lengths, epochs and GPUs: required by backend verl, not by local or trl."""
    for key in ("model", "max_prompt_length", "max_response_length", "epochs", "gpus"):
        del raw["task_settings"]["maze"][key]
        for preset in ("cpu", "trl_cpu"):
            raw["presets"][preset]["task_settings"]["maze"].pop(key, None)
    assert resolve_config(raw, "cpu")["tasks"] == ["maze"]
    assert resolve_config(raw, "trl_cpu")["backend"] == "trl"
    with pytest.raises(
        ConfigError,
        match=r"task_settings.maze: backend verl needs \['model', 'max_prompt_length', "
        r"'max_response_length', 'epochs', 'gpus'\]",
    ):
        resolve_config(raw, "paper")


def test_a_plugin_tasks_settings_in_a_second_file_are_refined_by_that_files_presets(raw):
    """A second --configfile with `task_settings.<plugin task>` (base values) and
    `presets.ci.task_settings.<plugin task>` (the ci preset's sizes): the preset's win, as for
    config.yaml's own tasks; --config still wins over both."""
    from vpo.overrides import user_overrides
    from vpo.task import TASKS, Task, register

    class Words(Task):
        name = "words_config_test"
        objectives = (("red", "Saying red"),)
        scalar_weights = (1.0,)
        single_format_line = "Answer."

        def multi_format(self, m):
            return f"{m} answers."

    register(Words())
    try:
        project = copy.deepcopy(raw)
        eval_block = {
            "budget": 6,
            "temperature": 0.7,
            "top_p": 1.0,
            "max_new_tokens": {"single": 40, "multi": 120},
            "goal_weights": "none",
            "seeds": [0],
            "gpus": 0,
        }
        second = {
            "task_settings": {"words_config_test": {"data": {"size": 64}, "m": 3, "eval": eval_block}},
            "presets": {"ci": {"task_settings": {"words_config_test": {"data": {"size": 8}}}}},
        }
        merged = deep_merge(raw, second)  # what Snakemake makes of --configfile config.yaml second.yaml
        overrides = user_overrides(merged, project, {"tasks": ["words_config_test"]})
        cfg = resolve_config(merged, "ci", overrides)
        assert cfg["tasks"] == ["words_config_test"]
        assert cfg["task_settings"]["words_config_test"]["data"] == {"size": 8}  # the preset's
        assert cfg["task_settings"]["words_config_test"]["eval"]["budget"] == 6  # the base value
        command_line = {"tasks": ["words_config_test"], "task_settings": {"words_config_test": {"data": {"size": 16}}}}
        cfg = resolve_config(merged, "ci", user_overrides(merged, project, command_line))
        assert cfg["task_settings"]["words_config_test"]["data"] == {"size": 16}
    finally:
        del TASKS["words_config_test"]


def test_a_preset_named_by_dots_and_numbers_that_are_not_finite_are_refused(raw):
    """`preset: ..` would make results/.. the repository; YAML's .nan and .inf pass a schema's number rules."""
    dots = copy.deepcopy(raw)
    dots["presets"][".."] = {}
    with pytest.raises(ConfigError, match=r"presets: '\.\.' does not match"):
        resolve_config(dots, "..")
    raw["method_settings"]["vpo"]["alpha"] = float("nan")
    raw["local_trainer"]["lr"] = float("inf")
    with pytest.raises(ConfigError) as err:
        resolve_config(raw, "cpu")
    assert "local_trainer.lr: inf is not a finite number" in str(err.value)
    assert "method_settings.vpo.alpha: nan is not a finite number" in str(err.value)


def test_a_profile_is_installed_under_a_name_not_a_path(tmp_path):
    from vpo.profiles import install_profile

    for name in ("../../x", "a/b", ".."):
        with pytest.raises(ValueError, match="not a path"):
            install_profile("slurm", tmp_path / "profiles", name)
    assert install_profile("slurm", tmp_path / "profiles", "my-slurm.v2") == tmp_path / "profiles" / "my-slurm.v2"
    assert not (tmp_path / "x").exists()


def test_a_users_file_sets_overrides_equal_to_the_project_or_not(raw):
    from vpo.overrides import file_overrides

    files = [
        {
            "seeds": [0, 1, 2],
            "preset": "ci",
            "presets": {"ci": {"seeds": [5]}},
            "task_settings": {"maze": {"m": 3}, "plugin_task": {"m": 2}},
        },
        {"seeds": ["4"]},
    ]
    # the first file holds presets: a copy of config.yaml, whose values equal to config.yaml's are not overrides
    assert file_overrides(files, raw) == {"seeds": [4]}
    assert file_overrides(files[:1], raw) == {}
    run_file = {k: v for k, v in files[0].items() if k != "presets"}  # the same values in a run file: all win
    assert file_overrides([run_file], raw) == {"seeds": [0, 1, 2], "task_settings": {"maze": {"m": 3}}}
    assert file_overrides([], raw) == {}


def test_a_variant_that_runs_another_method_is_another_cell(raw):
    """grpo, max_at_k, maxrl, gdpo and multi_rlvr have the same (empty) settings: a variant's digest
    must change with the method it runs, or changing it reruns nothing."""
    from vpo.config import cell_digest

    digests = []
    for base in ("grpo", "max_at_k", "maxrl"):
        raw["variants"]["mine"] = {"method": base, "settings": {}}
        raw["methods"] = ["grpo", "vpo", "mine"]
        digests.append(cell_digest(resolve_config(raw, "paper"), "maze", "mine"))
    assert len(set(digests)) == 3
    cfg = resolve_config(raw, "paper")
    assert cell_digest(cfg, "maze", "grpo") == cell_digest(resolve_config(raw, "paper"), "maze", "grpo")


def test_a_variant_redefined_to_run_another_method_loses_the_old_label(raw):
    from vpo.methods import get_method

    cfg = resolve_config(raw, "ablation", {"variants": {"vpo_m2": {"method": "multi_rlvr"}}})
    assert "label" not in cfg["variants"]["vpo_m2"]
    assert get_method("vpo_m2").label == "Multi-RLVR (vpo_m2)"
    assert resolve_config(cfg) == cfg  # a job reading the snapshot agrees
    labelled = resolve_config(raw, "ablation", {"variants": {"vpo_m2": {"method": "multi_rlvr", "label": "MR m2"}}})
    assert labelled["variants"]["vpo_m2"]["label"] == "MR m2"
    kept = resolve_config(raw, "ablation", {"variants": {"vpo_m2": {"m": 2}}})
    assert kept["variants"]["vpo_m2"]["label"] == raw["variants"]["vpo_m2"]["label"]


def test_paths_outside_the_presets_folders_are_named():
    from vpo.plan import paths_outside

    inside = [
        "results/ci/runs/{task}/{method}/seed{seed}/train.json",
        "figures/pass_at_k.pdf",
        "figures/ci/x.png",
        "logs/ci/train/{task}.log",
        "results/ci/config.yaml",
    ]
    outside = ["results/ci/../../config.yaml", "config.yaml", "/etc/passwd", "results/cpu/x", "logs/x.log"]
    assert paths_outside(inside + outside, "ci") == outside


def test_the_large_plan_note_counts_the_cells_jobs():
    from vpo.plan import LARGE_PLAN_JOBS, cell_jobs, large_plan_note

    cells = [("maze", "grpo"), ("maze", "vpo"), ("eureqa", "vpo")]
    assert cell_jobs(cells, 3, {"maze": 1, "eureqa": 4}.get) == 3 * (4 + 4 + 7)
    assert large_plan_note(LARGE_PLAN_JOBS) is None
    assert large_plan_note(170_059) == (
        "plan: about 170,059 jobs; Snakemake takes about 10 min and 3.5 GB of memory to "
        "plan them before the first one starts (fewer seeds, or a target such as one "
        "cell, plan faster)"
    )


def test_every_missing_key_is_named_in_one_error(raw):
    """A plugin's settings block missing three eval keys, and seven other problems: the three are named
    (not hidden behind "... and N more"), the other problems up to five, then how many more."""
    bad = copy.deepcopy(raw)
    for key in ("budget", "top_p", "seeds"):
        del bad["task_settings"]["maze"]["eval"][key]
    for method in ("vpo", "vpo_single"):  # seven problems of other kinds
        bad["method_settings"][method].update(alpha=-1.0, n_weights=0, sampler="x")
    bad["method_settings"]["goal_cond"]["alpha"] = -1.0
    with pytest.raises(ConfigError) as err:
        resolve_config(bad, "ci")
    text = str(err.value)
    for key in ("budget", "top_p", "seeds"):
        assert f"'{key}' is a required property" in text
    assert text.count("method_settings.") == 5 and "... and 2 more" in text
    one_more = copy.deepcopy(raw)
    del one_more["task_settings"]["maze"]["eval"]["budget"]
    one_more["task_settings"]["maze"]["eval"]["a_typo"] = 1
    with pytest.raises(ConfigError) as err:
        resolve_config(one_more, "ci")
    assert "'budget' is a required property" in str(err.value) and "a_typo" in str(err.value)
    assert "more" not in str(err.value).split("(allowed keys")[0]


def test_eval_gpus_is_needed_by_backend_verl_only(raw):
    cpu = copy.deepcopy(raw)
    for task in cpu["task_settings"].values():
        task["eval"].pop("gpus", None)
    for preset in ("presets",):
        for block in cpu[preset].values():
            for task in (block.get("task_settings") or {}).values():
                (task.get("eval") or {}).pop("gpus", None)
    assert resolve_config(cpu, "cpu")["task_settings"]["maze"]["eval"].get("gpus") is None  # the CPU backends
    with pytest.raises(ConfigError, match="task_settings.maze.eval.gpus: backend verl evaluates with vLLM"):
        resolve_config(cpu, "paper")


def test_workflow_config_applies_the_preset_under_the_users_files_and_command_line(tmp_path):
    """The one call rules/common.smk makes: the user's own --configfile and --config win over the preset,
    each file's keys and each overridden preset key are said on the notes stream, config.yaml passed as a
    --configfile counts as the project's."""
    import io

    import yaml

    from vpo.config import deep_merge
    from vpo.overrides import workflow_config

    project = yaml.safe_load((REPO / "config.yaml").read_text())
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(project))
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"seeds": [4, 5]}))
    command_line = {"preset": "cpu", "report": {"bootstrap_reps": 300}}
    merged = deep_merge(deep_merge(project, {"seeds": [4, 5]}), command_line)
    notes = io.StringIO()
    cfg = workflow_config(merged, tmp_path, [tmp_path / "config.yaml", mine], command_line, notes=notes)
    assert cfg["preset"] == "cpu" and cfg["seeds"] == [4, 5] and cfg["report"]["bootstrap_reps"] == 300
    assert cfg["backend"] == "local"  # the preset's own value where the user set nothing
    said = notes.getvalue()
    assert f"config: {mine} sets seeds over preset 'cpu'" in said
    assert "preset 'cpu' sets seeds, but your --configfile/--config value is used" in said
    assert "config.yaml sets" not in said
