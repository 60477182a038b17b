"""Reading the pipeline's files with errors that name the file, what is wrong and how to rebuild it:
a task's parquet split as plain Python rows (veRL's row schema: data_source, prompt, ability,
reward_model, extra_info), a JSON object (train.json, evalseed*.json) and a non-empty CSV (the aggregates);
and writing a table as CSV, atomically (`write_csv`)."""

from __future__ import annotations

import os
from pathlib import Path

from vpo.atomic import atomic_file


def rebuild_hint(path: str | os.PathLike) -> str:
    """The command that rebuilds a workflow output, with the preset whose tree holds it
    (results/<preset>/..., figures/<preset>/...): without it Snakemake plans the default preset only."""
    parts = Path(path).parts
    preset = next(
        (
            parts[i + 1]
            for i in range(len(parts) - 2)
            if parts[i] in ("results", "figures") and parts[i + 1] != "config"
        ),
        None,
    )
    option = f" --config preset={preset}" if preset else ""
    return f"rebuild it with `snakemake --cores all{option} -f {path}`"


def read_json_object(path: str | os.PathLike) -> dict:
    """A JSON file holding one object; ValueError naming the file otherwise."""
    import json

    try:
        value = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{path} is not readable JSON ({' '.join(str(err).split())}); {rebuild_hint(path)}") from err
    if not isinstance(value, dict):
        raise ValueError(f"{path} holds a JSON {type(value).__name__}, not an object; {rebuild_hint(path)}")
    return value


def read_csv_table(path: str | os.PathLike):
    """A CSV with a header and at least one row, as a DataFrame; ValueError naming the file otherwise."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path} is empty; {rebuild_hint(path)}") from None
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not a readable CSV ({' '.join(str(err).split())}); {rebuild_hint(path)}") from err
    if frame.empty:
        raise ValueError(f"{path} has a header but no rows; {rebuild_hint(path)}")
    return frame


def _split_path(data_dir: str | os.PathLike, split: str) -> Path:
    path = Path(data_dir) / f"{split}.parquet"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist; write it first with `vpo preprocess --task <task> --out {data_dir}`"
        )
    return path


def read_rows(data_dir: str | os.PathLike, split: str) -> list[dict]:
    """All rows of `<data_dir>/<split>.parquet` as plain dicts (prompt = list of messages): the rows as
    `vpo preprocess` wrote them, Python lists and numbers, a struct key another row has added as None. pyarrow
    alone reads them: every train and eval job reads a split, and importing pandas cost each 0.25 s (the
    five tasks' files read the same as pandas' rows made plain; pandas turned an integer beside a missing
    value into a float)."""
    import pyarrow.parquet as pq

    path = _split_path(data_dir, split)
    try:
        table = pq.ParquetFile(path).read()
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise ValueError(
            f"{path} is not a readable parquet file ({type(err).__name__}); rebuild it with "
            f"`vpo preprocess --task <task> --out {data_dir}`"
        ) from err
    if table.num_rows == 0:
        raise ValueError(f"{path} has no rows; rebuild it with `vpo preprocess --task <task> --out {data_dir}`")
    for column in ("data_source", "prompt", "reward_model"):
        if column not in table.column_names:
            raise ValueError(f"{data_dir}/{split}.parquet has no `{column}` column; re-run `vpo preprocess`")
    # pandas' metadata may name an index column (a frame written with its index); pandas sets it aside
    index = [name for name in (table.schema.pandas_metadata or {}).get("index_columns", []) if isinstance(name, str)]
    return table.drop_columns(index).to_pylist()


def write_csv(frame, path: str | os.PathLike) -> None:
    """Write a pandas table as CSV through vpo.atomic: a killed job leaves no complete-looking file. A `k`
    column is written as integers, empty for scalar metrics (not 1.0, 2.0, ...)."""
    if "k" in frame.columns:
        frame = frame.assign(k=frame["k"].astype("Int64"))
    with atomic_file(path) as tmp:
        frame.to_csv(tmp, index=False)
