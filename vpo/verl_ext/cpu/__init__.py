"""veRL 0.9.1's own trainer on CPU, plugged in from outside: for running the cluster path (veRL's
trainer, rollout, checkpoints and merger) on a machine without GPUs. Not a fast trainer.

`enable()` is called by `vpo.verl_ext.plugin` in every process of a job whose environment has
`VERL_PLATFORM=cpu` (the launcher sets it when the cell's `verl.device` is `cpu`), never otherwise.
It registers

    platform.CpuPlatform          veRL's platform `cpu` (device `cpu`, gloo, Ray `GPU` slots)
    rollout.TransformersReplica   rollout `transformers` (server, replica and in-worker adapter)

and adjusts two things from outside: veRL's process-group setup gets one backend (0.9.1 builds
"cpu:gloo,<device>:<backend>", which on the CPU platform reads "cpu:gloo,cpu:gloo", and torch rejects
a device named twice), and `Tensor.pin_memory` returns the tensor itself on a machine without an
accelerator (veRL's reference model pins its offloaded shards; torch refuses that without one). The
names used are semi-internal, so the version is checked first.
"""

from __future__ import annotations

import functools

PINNED_VERL = "0.9.1"  # the veRL release these plug-ins are written and tested against
ROLLOUT_NAME = "transformers"  # actor_rollout_ref.rollout.name of the CPU rollout


def _replica_class():
    # imported when veRL asks, not at registration: the rollout module imports veRL, whose import
    # runs this plug-in (a Ray actor of the server class starts by importing that module)
    from vpo.verl_ext.cpu.rollout import TransformersReplica

    return TransformersReplica


def check_version() -> None:
    import verl

    if verl.__version__ != PINNED_VERL:
        raise RuntimeError(
            f"the CPU mode of the veRL backend is written for veRL {PINNED_VERL}, but veRL "
            f"{verl.__version__} is installed; install verl=={PINNED_VERL} (verl/REQUIRED_VERL.txt)"
        )


def _single_cpu_backend(init):
    @functools.wraps(init)
    def wrapper(timeout_second=None, backend=None):
        return init(timeout_second=timeout_second, backend="gloo" if backend is None else backend)

    wrapper.vpo_cpu = True
    return wrapper


def _unpinned(tensor, *args, **kwargs):
    return tensor


def enable() -> None:
    """Register the CPU platform and the transformers rollout with veRL (idempotent)."""
    import sys

    check_version()
    from verl.plugin.platform.platform_manager import PlatformRegistry

    from vpo.verl_ext.cpu.platform import CpuPlatform

    PlatformRegistry.register("cpu")(CpuPlatform)  # before anything imports modules that ask for the platform
    import verl.utils.distributed as distributed
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = "vpo.verl_ext.cpu.rollout.TransformersAdapter"
    RolloutReplicaRegistry.register(ROLLOUT_NAME, _replica_class)
    import torch

    if not torch.accelerator.is_available():
        # the reference model's FSDP2 offload policy pins its shards (pin_memory=True is fixed in
        # veRL's engine); page-locking only serves copies to an accelerator, and torch refuses it without one
        torch.Tensor.pin_memory = _unpinned
    if not getattr(distributed.initialize_global_process_group_ray, "vpo_cpu", False):
        fixed = _single_cpu_backend(distributed.initialize_global_process_group_ray)
        distributed.initialize_global_process_group_ray = fixed
        for name in ("verl.workers.engine_workers", "verl.checkpoint_engine.base"):  # bound at their import
            module = sys.modules.get(name)
            if module is not None:
                module.initialize_global_process_group_ray = fixed
