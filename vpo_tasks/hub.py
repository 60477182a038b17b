"""Loading a task's raw data: from a local directory in the upstream layout, or from the Hugging
Face hub with `datasets`, failing in seconds (naming the setting to use instead) when the hub cannot
be reached."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


class DataUnavailable(ValueError):
    """The raw data can be read neither from the hub nor from a local path; the message says which
    setting to use."""


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub endpoint (HF_ENDPOINT or the library's default) accepts a TCP connection."""
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout):
            return True
    except OSError:
        return False


def load_hub_dataset(task: str, dataset_id: str, path_setting: str | None = None, **kwargs: Any):
    """`datasets.load_dataset(dataset_id, **kwargs)`; when the hub is unreachable (and the cache is
    not used offline via HF_HUB_OFFLINE=1), DataUnavailable naming the local-path setting
    (`path_setting`, by default task_settings.<task>.data.path)."""
    import datasets

    path_setting = path_setting or f"task_settings.{task}.data.path"

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    if not offline and not hub_reachable():
        raise DataUnavailable(
            f"{task}: the Hugging Face hub is not reachable for {dataset_id!r}; download the files once and set "
            f"{path_setting} (or `vpo preprocess --task {task} --set {path_setting.split('.data.')[1]}=DIR`) to their "
            "directory, "
            "or set HF_HUB_OFFLINE=1 to use a warm datasets cache"
        )
    return datasets.load_dataset(dataset_id, **kwargs)


def local_files(task: str, directory: str | os.PathLike, names: dict[str, str]) -> dict[str, Path]:
    """{split: path} for files expected under `directory`; DataUnavailable listing what is missing."""
    root = Path(directory).expanduser()
    paths = {split: root / name for split, name in names.items()}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise DataUnavailable(f"{task}: task_settings.{task}.data.path = {str(root)!r} lacks {', '.join(missing)}")
    return paths
