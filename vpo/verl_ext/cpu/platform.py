"""The CPU platform for veRL 0.9.1 (`VERL_PLATFORM=cpu`): device `cpu`, collectives over gloo.

veRL asks its platform for a device name, a torch device module, a communication backend and a
Ray resource. Ray's pools in veRL count only accelerator resources, so this platform names Ray's
`GPU` resource and the launcher declares as many GPU slots as the job has workers
(`ray_kwargs.ray_init.num_gpus`); nothing runs on a GPU. `current_device()` is the string "cpu",
because veRL moves modules with `.to(get_device_id())`.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Optional

import torch
from verl.plugin.platform.platform_base import PlatformBase


class _CpuDeviceModule:
    """What veRL calls on `get_torch_device()`: torch.cpu, plus the CUDA-style memory, seed and
    RNG-state calls that the CPU has no use for (memory figures read as 0)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)  # is_available, synchronize, current_device, device_count, ...

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        free = os.sysconf("SC_AVPHYS_PAGES") * size
        return free, pages * size


_DEVICE_MODULE = _CpuDeviceModule()


class CpuPlatform(PlatformBase):
    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> _CpuDeviceModule:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # chosen by VERL_PLATFORM=cpu only, never by auto-detection

    def current_device(self) -> str:  # type: ignore[override]
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # Ray sets it for the fake GPU slots; nothing reads it here

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
