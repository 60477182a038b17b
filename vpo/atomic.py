"""Writing files so that a killed job never leaves one that looks complete: write a temporary
sibling, then rename it over the target (a rename is atomic on one filesystem)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def write_json_atomic(path: str | os.PathLike, payload: Any) -> Path:
    return write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=True, default=float) + "\n")
