"""The CPU mode of the veRL backend (vpo/verl_ext/cpu), piece by piece against veRL 0.9.1 as
installed: registration in veRL's own registries (in a fresh process, as veRL's plugin loading does
it), the process group veRL's worker opens on the CPU platform, the pinned-version check, and the
transformers rollout server's sampling, log-probs and weight updates checked against plain forwards."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("verl")
torch = pytest.importorskip("torch")

from vpo.generate import SamplingSettings  # noqa: E402
from vpo.verl_ext.cpu.rollout import TransformersServer, sample_batch  # noqa: E402

REGISTRATION = textwrap.dedent("""
    import json, os, socket
    import torch.distributed as dist
    import verl  # loads vpo.verl_ext.plugin through VERL_USE_EXTERNAL_MODULES
    from verl.plugin.platform.platform_manager import get_platform
    from verl.utils.device import get_device_name, get_torch_device
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class
    from verl.workers import engine_workers
    platform = get_platform()
    engine_workers.initialize_global_process_group_ray(timeout_second=None)  # as ActorRolloutRefWorker does
    print(json.dumps({
        "platform": type(platform).__name__, "device": get_device_name(), "backend": dist.get_backend(),
        "ray_resource": platform.ray_resource_options(2), "device_id": platform.current_device(),
        "adapter": get_rollout_class("transformers", "async").__name__,
        "replica": get_rollout_replica_class("transformers").__name__,
        "rng_state_len": int(get_torch_device().get_rng_state().numel()),
    }))
""")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(code: str, **env) -> subprocess.CompletedProcess:
    import os

    full = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "vpo.verl_ext.plugin", **env}
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_cpu_mode_registers_in_verl_and_opens_a_gloo_process_group():
    proc = _run(
        REGISTRATION,
        VERL_PLATFORM="cpu",
        RANK="0",
        WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {
        "platform": "CpuPlatform",
        "device": "cpu",
        "backend": "gloo",
        "ray_resource": {"num_gpus": 2},
        "device_id": "cpu",
        "adapter": "TransformersAdapter",
        "replica": "TransformersReplica",
        "rng_state_len": int(torch.get_rng_state().numel()),
    }


@pytest.mark.slow
def test_without_the_cpu_platform_nothing_is_registered():
    code = (
        "import verl\nfrom verl.workers.rollout.base import _ROLLOUT_REGISTRY\n"
        "from verl.plugin.platform.platform_manager import PlatformRegistry\n"
        "print(('transformers', 'async') in _ROLLOUT_REGISTRY, PlatformRegistry.get('cpu') is not None)"
    )
    proc = _run(code, VERL_PLATFORM="")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["False", "False"]


def test_another_verl_version_is_refused(monkeypatch):
    import verl

    from vpo.verl_ext.cpu import PINNED_VERL, check_version

    check_version()  # the installed one is the pinned one
    monkeypatch.setattr(verl, "__version__", "0.10.0")
    with pytest.raises(RuntimeError, match=f"written for veRL {PINNED_VERL}, but veRL 0.10.0 is installed"):
        check_version()


@pytest.fixture(scope="module")
def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        eos_token_id=1,
        bos_token_id=0,
        pad_token_id=2,
    )
    return LlamaForCausalLM(config).eval()


def _logprobs_by_full_forward(model, prompt, tokens):
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    return [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]


def _greedy_by_hand(model, prompt, n):
    ids = list(prompt)
    for _ in range(n):  # one full forward per token, no cache, no padding
        with torch.no_grad():
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def test_batched_sampling_matches_one_prompt_at_a_time_forwards(tiny_llama):
    prompts = [[0, 5, 9, 11, 3], [0, 7], [0, 4, 4, 8]]  # different lengths: left padding in the batch
    greedy = sample_batch(
        tiny_llama,
        prompts,
        max_tokens=[8, 8, 3],
        sampling=SamplingSettings(temperature=0.0),
        eos_token_id=None,
        pad_token_id=2,
        with_logprobs=True,
    )
    for prompt, limit, (tokens, logp) in zip(prompts, [8, 8, 3], greedy):
        assert tokens == _greedy_by_hand(tiny_llama, prompt, limit)  # each row stops at its own limit
        assert logp == pytest.approx(_logprobs_by_full_forward(tiny_llama, prompt, tokens), abs=1e-4)
    torch.manual_seed(3)
    top1 = sample_batch(
        tiny_llama,
        prompts,
        max_tokens=[8, 8, 3],
        sampling=SamplingSettings(top_k=1, seed=None),
        eos_token_id=None,
        pad_token_id=2,
        with_logprobs=False,
    )
    assert [t for t, _ in top1] == [t for t, _ in greedy]  # top-k 1 leaves only the argmax
    assert all(lp is None for _, lp in top1)
    torch.manual_seed(3)
    sampled = sample_batch(
        tiny_llama,
        prompts * 4,
        max_tokens=[30] * 12,
        sampling=SamplingSettings(top_p=0.9),
        eos_token_id=1,
        pad_token_id=2,
        with_logprobs=True,
    )
    for prompt, (tokens, logp) in zip(prompts * 4, sampled):
        assert logp == pytest.approx(_logprobs_by_full_forward(tiny_llama, prompt, tokens), abs=1e-4)
        assert 1 not in tokens[:-1] and (tokens[-1] == 1 or len(tokens) == 30)  # ends at EOS or the limit
    assert len({tuple(t) for t, _ in sampled}) > 3  # sampling, not greedy


def test_server_generates_within_limits_and_takes_new_weights(tiny_llama, tmp_path):
    tiny_llama.save_pretrained(tmp_path / "model")
    server = TransformersServer(
        {"prompt_length": 16, "response_length": 6, "max_model_len": None}, {"path": str(tmp_path / "model")}
    )
    greedy = {"temperature": 0, "top_p": 1.0, "top_k": -1, "logprobs": True}

    async def step():  # as veRL's agent loop does: every request of a step at once
        return await asyncio.gather(
            server.generate("r1", prompt_ids=[0, 5, 9], sampling_params=greedy),
            server.generate("r2", prompt_ids=[0] * 20, sampling_params={"temperature": 0, "max_tokens": 50}),
            server.generate("r3", prompt_ids=[0, 7], sampling_params=greedy),
        )

    out, capped, other = asyncio.run(step())
    assert out.token_ids == _greedy_by_hand(tiny_llama, [0, 5, 9], 6)  # response_length 6, no EOS in 40 ids
    assert len(out.log_probs) == 6 and out.stop_reason == "completed"
    assert other.token_ids == _greedy_by_hand(tiny_llama, [0, 7], 6)
    assert len(capped.token_ids) == 22 - 20 and capped.log_probs is None  # room left in 16 + 6 positions

    new = {k: v + 0.5 for k, v in tiny_llama.state_dict().items()}
    assert asyncio.run(server.load_weights(new))["updates"] == 1
    assert all(torch.equal(server.model.state_dict()[k], v) for k, v in new.items())
    with pytest.raises(KeyError, match="did not send"):
        asyncio.run(server.load_weights({k: v for k, v in new.items() if "layers.1." not in k}))
    with pytest.raises(KeyError, match="does not have"):
        asyncio.run(server.load_weights({**new, "extra.weight": torch.zeros(1)}))
