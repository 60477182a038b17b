"""Reading a task's parquet split into plain Python rows (veRL row schema, reference/verl.md)."""

from __future__ import annotations

import os
from pathlib import Path

from vpo.prompts import to_plain


def split_path(data_dir: str | os.PathLike, split: str) -> Path:
    path = Path(data_dir) / f"{split}.parquet"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist; write it first with `vpo preprocess --task <task> --out {data_dir}`"
        )
    return path


def read_rows(data_dir: str | os.PathLike, split: str) -> list[dict]:
    """All rows of `<data_dir>/<split>.parquet` as plain dicts (prompt = list of messages)."""
    import pandas as pd

    path = split_path(data_dir, split)
    try:
        frame = pd.read_parquet(path)
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise ValueError(f"{path} is not a readable parquet file ({type(err).__name__}); rebuild it with "
                         f"`vpo preprocess --task <task> --out {data_dir}`") from err
    if frame.empty:
        raise ValueError(f"{path} has no rows; rebuild it with `vpo preprocess --task <task> --out {data_dir}`")
    for column in ("data_source", "prompt", "reward_model"):
        if column not in frame.columns:
            raise ValueError(f"{data_dir}/{split}.parquet has no `{column}` column; re-run `vpo preprocess`")
    return [to_plain(record) for record in frame.to_dict("records")]
