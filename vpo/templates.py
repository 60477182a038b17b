"""Prompt templates: a user's own wording of a task's prompts, one text file per prompt mode.

    task_settings:
      maze:
        prompts: {single: prompts/maze_single.txt, multi: prompts/maze_multi.txt, goal: null}

A template is text with `{name}` placeholders (`{{` and `}}` are literal braces). Every task's rows
carry the pieces of their problem as named fields (`extra_info.prompt_fields`, JSON; the task's
`template_fields`), and each mode adds its own:

    single   the task's fields, {format}: the task's single-answer format sentence
    multi    the task's fields, {m}, {multi_format}: the task's m-answer format text
    goal     the task's fields, {format}, {weights}: one line per objective, "- description: w"

A template must use the task's `required_template_fields` (without them the model cannot see the
problem), `{m}` in multi and `{weights}` in goal, and nothing unknown; `template_problems` checks this
when the config is read, so a bad file stops the plan and names itself. A mode without a template
keeps the project's own wording (`vpo.prompts`).

`vpo preprocess` applies them (`apply_templates`): the single template becomes each row's prompt, and
the multi and goal templates travel in the row (`extra_info.prompt_templates`), where `prepare_row`
renders them with m and the weights, so training, evaluation and the search all see them.
Substitution is one pass over the template: text a field brings in is never read as a placeholder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from vpo.task import Task

PROMPT_MODES = ("single", "multi", "goal")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
_MAX_TEMPLATE_BYTES = 65536  # a template travels in every row (the paper's maze: 1000 rows)
_MODE_FIELDS = {"single": ("format",), "multi": ("m", "multi_format"), "goal": ("format", "weights")}
_MODE_REQUIRED = {"single": (), "multi": ("m",), "goal": ("weights",)}


class TemplateError(ValueError):
    """A template file that cannot be used; the message names the file and what is wrong."""


def placeholders(text: str) -> list[str]:
    """The placeholder names of a template, in order of first use."""
    names = [match.group(1) for match in _PLACEHOLDER.finditer(text) if match.group(1) is not None]
    return list(dict.fromkeys(names))


def render(text: str, values: Mapping[str, Any]) -> str:
    """The template with each placeholder replaced by its value, in one pass."""

    def replace(match: re.Match) -> str:
        if match.group(1) is None:
            return match.group(0)[0]
        return str(values[match.group(1)])

    return _PLACEHOLDER.sub(replace, text)


def check_template(task: Task, mode: str, text: str, source: str) -> None:
    """TemplateError naming `source` when the text lacks a placeholder the mode needs or uses one it
    does not know."""
    used = placeholders(text)
    known = [*task.template_fields, *_MODE_FIELDS[mode]]
    unknown = [name for name in used if name not in known]
    missing = [name for name in [*task.required_template_fields, *_MODE_REQUIRED[mode]] if name not in used]
    if unknown or missing:
        problems = ([f"lacks {', '.join('{' + n + '}' for n in missing)}"] if missing else []) + (
            [f"uses unknown {', '.join('{' + n + '}' for n in unknown)}"] if unknown else []
        )
        raise TemplateError(
            f"prompt template {source} ({task.name}, {mode}) {' and '.join(problems)}; "
            f"a {mode} template of {task.name} may use {', '.join('{' + n + '}' for n in known)} "
            f"and must use {', '.join('{' + n + '}' for n in [*task.required_template_fields, *_MODE_REQUIRED[mode]])} "
            "(write {{ and }} for literal braces)"
        )


def read_templates(task: Task, prompts: Mapping[str, Any] | None, base: Path | None = None) -> dict[str, str]:
    """{mode: checked template text} of task_settings.<task>.prompts (modes set to null are left out);
    a relative path is read against `base` (the project directory) when given."""
    out = {}
    for mode, path in (prompts or {}).items():
        if mode not in PROMPT_MODES:
            raise TemplateError(
                f"task_settings.{task.name}.prompts.{mode}: not a prompt mode ({', '.join(PROMPT_MODES)})"
            )
        if path is None:
            continue
        where = f"task_settings.{task.name}.prompts.{mode}"
        file = Path(base or ".") / Path(str(path)).expanduser()
        try:
            if file.is_file() and file.stat().st_size > _MAX_TEMPLATE_BYTES:  # it is copied into every row
                raise TemplateError(
                    f"{where}: {path} has {file.stat().st_size} bytes; a prompt template may "
                    f"have {_MAX_TEMPLATE_BYTES} (it is copied into every row)"
                )
            text = file.read_text(encoding="utf-8")
        except OSError as err:
            raise TemplateError(f"{where}: cannot read {path} ({err.strerror})") from None
        except UnicodeDecodeError as err:
            raise TemplateError(f"{where}: {path} is not UTF-8 text (byte {err.start}); save it as UTF-8") from None
        lone = _PLACEHOLDER.sub(lambda match: " " * len(match.group(0)), text)
        for brace in ("{", "}"):
            if brace in lone:
                raise TemplateError(
                    f"{where}: {path} has a lone '{brace}' at character {lone.index(brace)}; "
                    f"write {brace * 2} for a literal brace"
                )
        check_template(task, mode, text, str(path))
        out[mode] = text
    return out


def template_problems(task: Task, settings: Mapping[str, Any], base: Path | None = None) -> list[str]:
    """The config check's view: one message per unusable template of a task's settings."""
    try:
        read_templates(task, settings.get("prompts"), base)
        return []
    except TemplateError as err:
        return [str(err)]


def _weight_lines(task: Task, weights: Sequence[float]) -> str:
    return "\n".join(f"- {description}: {w:.2f}" for (_, description), w in zip(task.objectives, weights))


def _mode_values(task: Task, mode: str, fields: Mapping[str, str], m: int, weights: Sequence[float] | None) -> dict:
    values = dict(fields)
    if mode == "single":
        values["format"] = task.single_format_line
    elif mode == "multi":
        values.update(m=m, multi_format=task.multi_format(m))
    else:
        values.update(format=task.single_format_line, weights=_weight_lines(task, [] if weights is None else weights))
    return values


def last_user_turn(messages: list[dict[str, Any]]) -> int:
    users = [i for i, msg in enumerate(messages) if msg.get("role") == "user"]
    if not users:
        raise ValueError("prompt has no user message to rewrite")
    return users[-1]


def apply_templates(task: Task, rows: list[dict[str, Any]], templates: Mapping[str, str]) -> list[dict[str, Any]]:
    """The rows with the single template as their last user turn and the others carried along."""
    carried = json.dumps({mode: text for mode, text in templates.items() if mode != "single"})
    for row in rows:
        extra = row["extra_info"]
        if "single" in templates:
            fields = json.loads(extra["prompt_fields"])
            messages = [dict(msg) for msg in row["prompt"]]
            messages[last_user_turn(messages)]["content"] = render(
                templates["single"], _mode_values(task, "single", fields, 1, None)
            )
            row["prompt"] = messages
        extra["prompt_templates"] = carried
    return rows


def templated_content(
    task: Task, extra: Mapping[str, Any], mode: str, m: int, weights: Sequence[float] | None
) -> str | None:
    """The last user turn a carried template gives for `mode`, or None when the row carries none."""
    template = json.loads(extra.get("prompt_templates") or "{}").get(mode)
    if template is None:
        return None
    return render(template, _mode_values(task, mode, json.loads(extra["prompt_fields"]), m, weights))
