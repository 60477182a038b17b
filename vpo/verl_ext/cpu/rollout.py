"""A transformers rollout for veRL 0.9.1 on CPU: rollout name `transformers`.

veRL's v1 trainer samples through rollout *servers* (Ray actors, one per replica) and keeps an
in-worker *adapter* next to the training engine that pushes new weights to its server. The three
classes here fill those roles with a plain Hugging Face model:

    TransformersServer   the Ray actor: `generate(request_id, prompt_ids, sampling_params)` ->
                         TokenOutput (token ids, and log-probs when asked), batched across
                         concurrent requests; `load_weights`; and the
                         control calls veRL makes on every server (no-ops here)
    TransformersReplica  starts the server of a replica (`launch_servers`)
    TransformersAdapter  the in-worker BaseRollout: consumes the trainer's (name, tensor) stream
                         (every rank must) and hands the full state to its server

Requests that arrive together (veRL sends one per sample, a whole step's at once) are answered in
batches of equal sampling settings. This is for running the cluster path on any machine, not for
speed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Generator

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from vpo.generate import SamplingSettings, hf_generate_kwargs, left_pad
from vpo.verl_ext.cpu import ROLLOUT_NAME

BATCH = 64  # requests per generate call

log = logging.getLogger(__name__)


def _get(config: Any, key: str, default: Any = None) -> Any:
    """A field of a veRL config given as a dataclass or as an OmegaConf mapping."""
    if isinstance(config, dict) or hasattr(config, "keys"):
        return config.get(key, default)
    return getattr(config, key, default)


def _server_name(replica_rank: int, node_rank: int = 0) -> str:
    """The Ray actor name of a replica's server (what the adapter looks up)."""
    return f"{ROLLOUT_NAME}_server_{replica_rank}_{node_rank}"


def sample_batch(
    model,
    prompts: list[list[int]],
    *,
    max_tokens: list[int],
    sampling: SamplingSettings,
    eos_token_id: int | None,
    pad_token_id: int,
    with_logprobs: bool,
) -> list[tuple[list[int], list[float] | None]]:
    """Sample one continuation per prompt in one left-padded `generate` call with the KV cache.

    Each row stops at its end-of-sequence token or at its own `max_tokens` (`sampling.max_new_tokens`
    is not read). Log-probs are of the model's own distribution (raw logits, before temperature and
    top-p), as veRL's vLLM server reports them.
    """
    input_ids, attention = left_pad(prompts, pad_token_id)
    width = input_ids.shape[1]
    kwargs = {**hf_generate_kwargs(sampling), "max_new_tokens": max(max_tokens)}
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            return_dict_in_generate=True,
            output_logits=with_logprobs,
            **kwargs,
        )
    generated = out.sequences[:, width:]
    logp = None
    if with_logprobs:
        raw = torch.log_softmax(torch.stack(out.logits, dim=1).float(), dim=-1)
        logp = raw.gather(-1, generated.unsqueeze(-1)).squeeze(-1)
    results = []
    for row, limit in enumerate(max_tokens):
        tokens = generated[row, :limit].tolist()
        if eos_token_id in tokens:
            tokens = tokens[: tokens.index(eos_token_id) + 1]
        results.append((tokens, logp[row, : len(tokens)].tolist() if with_logprobs else None))
    return results


class TransformersServer:
    """The rollout server of one replica (a Ray actor; veRL calls `generate` for every sample)."""

    def __init__(self, config, model_config, *args, replica_rank: int = 0, node_rank: int = 0, **kwargs):
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        path = _get(model_config, "local_path") or _get(model_config, "path")
        self.model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
        self.eos_token_id = self.model.generation_config.eos_token_id or self.model.config.eos_token_id
        if isinstance(self.eos_token_id, (list, tuple)):
            self.eos_token_id = self.eos_token_id[0]
        self.prompt_length = int(_get(config, "prompt_length"))
        self.response_length = int(_get(config, "response_length"))
        self.max_model_len = int(_get(config, "max_model_len") or self.prompt_length + self.response_length)
        self.pad_token_id = self.model.config.pad_token_id
        if self.pad_token_id is None:
            self.pad_token_id = self.eos_token_id
        self.global_steps = None
        self.weight_updates = 0
        self.lock = asyncio.Lock()  # generation and weight updates never overlap
        self.pending: list[tuple[list[int], tuple, int, asyncio.Future]] = []
        self.drainer: asyncio.Task | None = None

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        **kwargs,
    ) -> TokenOutput:
        if image_data is not None or video_data is not None:
            raise ValueError("the transformers CPU rollout generates text only")
        params = dict(sampling_params)
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens leaves no room within {self.max_model_len}")
        max_tokens = params.pop("max_tokens", params.pop("max_new_tokens", None))
        if max_tokens is None:
            max_tokens = min(self.response_length, self.prompt_length + self.response_length - len(prompt_ids))
        max_tokens = max(1, min(int(max_tokens), room))
        key = (
            SamplingSettings(
                temperature=float(params.get("temperature", 1.0)),
                top_p=float(params.get("top_p", 1.0)),
                top_k=int(params.get("top_k", -1) or -1),
                seed=None,
            ),
            bool(params.get("logprobs")),
        )
        future = asyncio.get_running_loop().create_future()
        self.pending.append((list(prompt_ids), key, max_tokens, future))
        if self.drainer is None or self.drainer.done():
            self.drainer = asyncio.create_task(self._drain())
        tokens, logprobs = await future
        return TokenOutput(
            token_ids=tokens,
            log_probs=logprobs,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    async def _drain(self) -> None:
        """Answer the waiting requests in batches of equal sampling settings (veRL sends one request
        per sample, all of a step's at once)."""
        while self.pending:
            await asyncio.sleep(0.02)  # let the rest of a step's requests arrive
            waiting, self.pending = self.pending, []
            groups: dict[tuple, list] = {}
            for request in waiting:
                groups.setdefault(request[1], []).append(request)
            for (sampling, logprobs), requests in groups.items():
                for start in range(0, len(requests), BATCH):
                    chunk = requests[start : start + BATCH]
                    try:
                        async with self.lock:
                            results = await asyncio.to_thread(
                                sample_batch,
                                self.model,
                                [r[0] for r in chunk],
                                max_tokens=[r[2] for r in chunk],
                                sampling=sampling,
                                eos_token_id=self.eos_token_id,
                                pad_token_id=self.pad_token_id,
                                with_logprobs=logprobs,
                            )
                    except Exception as err:  # every waiting request learns why
                        for request in chunk:
                            request[3].set_exception(err)
                        continue
                    for request, result in zip(chunk, results):
                        request[3].set_result(result)

    async def load_weights(self, state: dict[str, torch.Tensor]) -> dict[str, int]:
        """Replace the model's weights with the trainer's; every parameter must be given."""
        async with self.lock:
            own = self.model.state_dict()
            unknown = sorted(set(state) - set(own))
            if unknown:
                raise KeyError(f"weights the rollout model does not have: {unknown[:5]}")
            missing = sorted(set(own) - set(state))
            tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
            if set(missing) - tied:
                raise KeyError(f"weights the trainer did not send: {missing[:5]}")
            self.model.load_state_dict(state, strict=False)
            self.weight_updates += 1
        return {"tensors": len(state), "updates": self.weight_updates}

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def get_server_address(self) -> tuple[str, None]:
        return ray.get_runtime_context().get_actor_name(), None

    # control calls veRL makes on every server; nothing to free or pause on CPU
    async def wake_up(self, *args, **kwargs) -> None: ...
    async def sleep(self, *args, **kwargs) -> None: ...
    async def abort_all_requests(self, *args, **kwargs) -> None: ...
    async def resume_generation(self, *args, **kwargs) -> None: ...
    async def clear_kv_cache(self, *args, **kwargs) -> None: ...
    async def release_kv_cache(self, *args, **kwargs) -> None: ...
    async def resume_kv_cache(self, *args, **kwargs) -> None: ...
    async def start_profile(self, *args, **kwargs) -> None: ...
    async def stop_profile(self, *args, **kwargs) -> None: ...


class TransformersReplica(RolloutReplica):
    """One replica = one server actor on the node of its trainer ranks."""

    async def launch_servers(self) -> None:
        name = _server_name(self.replica_rank)
        server = ray.remote(TransformersServer).options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
        handle = server.remote(self.config, self.model_config, replica_rank=self.replica_rank, node_rank=0)
        self.servers = [handle]
        self._server_handle = handle
        self._server_address, _ = await handle.get_server_address.remote()

    def rollout_worker_use_gpu(self) -> bool:
        return False


class TransformersAdapter(BaseRollout):
    """The in-worker side: passes the trainer's weights to this rank's replica server."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1, **kwargs):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        per_replica = int(self.config.tensor_model_parallel_size) * int(self.config.data_parallel_size)
        self.replica_rank = rank // per_replica if replica_rank == -1 else replica_rank
        self.has_server = rank % per_replica == 0
        self.server = None

    def _server(self):
        if self.server is None:
            self.server = ray.get_actor(_server_name(self.replica_rank))
        return self.server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(
        self, weights: Generator[tuple[str, torch.Tensor], None, None], wire_format: str = "named_tensors", **kwargs
    ) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"the transformers CPU rollout takes full named tensors, not {wire_format!r}")
        state = {}
        for name, tensor in weights:  # every rank consumes the stream (FSDP gathers collectively)
            if self.has_server:
                tensor = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
                state[name] = tensor.detach().to("cpu", torch.float32).clone()
        if self.has_server:
            result = await self._server().load_weights.remote(state)
            log.info("rollout weights updated: %s", result)
            if kwargs.get("global_steps") is not None:
                await self._server().set_global_steps.remote(kwargs["global_steps"])
