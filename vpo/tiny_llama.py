"""The CPU backend's tiny Llama models without transformers: the network's math, the model, its tokenizer.

One Llama block, written once: the functions below (embedding lookups aside: RMSNorm, the default
rotary embedding, a layer's attention inputs, attention over any keys and values, the MLP, the final
norm and head) are what `TinyLlama.forward`, the sampler (`vpo.llama_sampler`, over a KV cache) and the
trainer's grouped forward (`vpo.local.group_forward`, responses over their group's prompt) compute with.
They read a layer's parameters by transformers' names, so they run on `TinyLlama` and on transformers'
own `LlamaForCausalLM` alike; tests/test_tiny_llama.py holds them equal to transformers' model, on the
default config and on one with another rope theta, norm epsilon, head size and fewer key/value heads.

Why not transformers' model classes: importing transformers costs a job 0.7 s, its Llama classes (whose
masking code imports torch._dynamo) and `AutoTokenizer` about 3 s on this project's 2-core machine,
and every local train, evaluation and search job paid it (about 40 per default run). A directory as
`vpo base-model` and the local trainer write it (a float32 `LlamaForCausalLM` with the default rotary
embedding, no biases, SiLU) loads here into plain `torch.nn` modules under the same parameter names, with
its word-level tokenizer through the `tokenizers` library and the project's chat template. Saving writes
the Hugging Face layout back (config.json, generation_config.json, model.safetensors with tied weights
stored once, the tokenizer files it loaded), so merge, evaluation and any transformers or vLLM reader
see the files they read. Anything else is loaded by transformers (`vpo.generate.load_pretrained`).

Shapes: N rows, L positions, H hidden size, V vocabulary, heads x d (head size) queries, kv heads x d keys.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

# The prompt format of the tiny models, rendered as transformers' `apply_chat_template` renders it.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|> ' + message['content'] + ' ' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@dataclass(frozen=True)
class TinyModelSettings:
    """Architecture of the tiny Llama-family policy (sizes from config.yaml's local_trainer block)."""

    hidden_size: int = 128  # model width
    num_layers: int = 2  # transformer blocks
    num_heads: int = 2  # attention heads (head dim = hidden_size / num_heads; vLLM on CPU needs >= 32)
    intermediate_size: int = 256  # MLP width
    max_positions: int = 1024  # longest prompt + response the model can see
    min_token_count: int = 1  # words seen fewer times in the corpus map to <unk>


def _computes_exactly(config: dict) -> bool:
    """True for a Llama config (config.json as a dict) whose network this module and the plain-torch
    sampler compute as transformers does: a float32 `LlamaForCausalLM` with `standard_block`."""
    return (
        config.get("architectures") == ["LlamaForCausalLM"]
        and config.get("dtype", config.get("torch_dtype")) == "float32"
        and standard_block(config)
    )


def standard_block(config: dict) -> bool:
    """The block below is this config's (a config as a dict): the default rotary embedding, SiLU, no
    biases, no tensor-parallel split of the projections."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {"rope_type": "default"}
    return (
        rope.get("rope_type", "default") == "default"
        and config.get("hidden_act") == "silu"
        and not config.get("attention_bias")
        and not config.get("mlp_bias")
        and config.get("pretraining_tp", 1) == 1
    )


def is_tiny_llama_dir(path: str | Path) -> bool:
    """A model directory this module loads: a config it computes exactly and the tiny models' tokenizer
    (a `tokenizers` file and the project's chat template)."""
    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text())
        template = (path / "chat_template.jinja").read_text()
    except (OSError, json.JSONDecodeError):
        return False
    return (
        _computes_exactly(config)
        and template == CHAT_TEMPLATE
        and (path / "tokenizer.json").is_file()
        and (path / "model.safetensors").is_file()
    )


class TinyTokenizer:
    """The tiny models' word-level tokenizer through `tokenizers` alone: what the trainer, evaluation and
    the model server call of transformers' fast tokenizer (encoding without special tokens, decoding,
    the chat template, the special tokens' ids), with the same results (tests/test_local_model.py)."""

    padding_side = "left"
    chat_template = CHAT_TEMPLATE

    def __init__(self, path: str | Path):
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        # transformers' environment options, so the template renders as `apply_chat_template` renders it
        self.template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(
            self.chat_template
        )
        path = Path(path)
        # the files as loaded, written back by save_pretrained (the directory may change after loading)
        self.files = {name: (path / name).read_bytes() for name in TOKENIZER_FILES}
        self.backend = Tokenizer.from_str(self.files["tokenizer.json"].decode())
        config = json.loads(self.files["tokenizer_config.json"])
        self.special_tokens = {}
        for role in ("pad", "bos", "eos", "unk"):
            token = config.get(f"{role}_token")
            token = token.get("content") if isinstance(token, dict) else token  # an AddedToken written out
            self.special_tokens[f"{role}_token"] = token
            setattr(self, f"{role}_token_id", None if token is None else self.backend.token_to_id(token))

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": self.backend.encode(text, add_special_tokens=add_special_tokens).ids}

    def __len__(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def get_vocab(self) -> dict:
        return self.backend.get_vocab(with_added_tokens=True)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self, conversation, add_generation_prompt: bool = False, tokenize: bool = False, **variables
    ):
        text = self.template.render(
            messages=list(conversation), add_generation_prompt=add_generation_prompt, **self.special_tokens, **variables
        )
        return self(text)["input_ids"] if tokenize else text

    def save_pretrained(self, path: str | Path) -> None:
        for name, content in self.files.items():
            (Path(path) / name).write_bytes(content)


# ---- the network's math, once ---------------------------------------------------------------------


class Dims:
    """What the block's functions read from a Llama config (TinyLlama's or transformers' `LlamaConfig`)."""

    def __init__(self, config):
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.scale = 1.0 / math.sqrt(self.head_dim)
        # the default rotary embedding's inverse frequencies (head_dim / 2,), as transformers computes them
        rope = getattr(config, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))


def rms_norm(x, weight, eps: float):
    """weight * x / sqrt(mean(x^2) + eps) over the last dimension (torch's rms_norm computes it in
    transformers' order: the same floats)."""
    return torch.nn.functional.rms_norm(x, x.shape[-1:], weight, eps)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_tables(dims: Dims, positions):
    """cos, sin (N, 1, L, d) at integer positions (N, L)."""
    freqs = positions[..., None].float() * dims.inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[:, None], emb.sin()[:, None]


def left_padded_positions(attention):
    """transformers' positions for left-padded rows (N, L): real tokens count from 0, pads sit at 1."""
    return (attention.long().cumsum(-1) - 1).masked_fill(attention == 0, 1)


def attention_inputs(layer, dims: Dims, hidden, cos, sin):
    """Queries (N, heads, L, d), keys and values (N, kv heads, L, d) of one layer for hidden (N, L, H):
    the input norm, the projections, the rotation of queries and keys."""
    rows, length, _ = hidden.shape
    attn = layer.self_attn
    x = rms_norm(hidden, layer.input_layernorm.weight, dims.eps)
    q = attn.q_proj(x).view(rows, length, dims.heads, dims.head_dim).transpose(1, 2)
    k = attn.k_proj(x).view(rows, length, dims.kv_heads, dims.head_dim).transpose(1, 2)
    v = attn.v_proj(x).view(rows, length, dims.kv_heads, dims.head_dim).transpose(1, 2)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v


def additive(allowed):
    """A bool mask (True = may attend) as the float mask attention_output takes: 0 or -inf. Made once per
    forward: scaled_dot_product_attention turns a bool mask into this on every call (the same result)."""
    return torch.zeros(allowed.shape).masked_fill(~allowed, -float("inf"))


def left_padded_mask(attention):
    """The additive mask (N, 1, L, L) of left-padded rows (N, L) attending to themselves: causal over the
    real tokens; a pad query attends to itself only (its output is never read; a row with no key would
    be NaN)."""
    length = attention.shape[1]
    causal = torch.ones((length, length), dtype=torch.bool).tril()
    return additive(
        (causal[None, None] & attention.bool()[:, None, None, :]) | torch.eye(length, dtype=torch.bool)[None, None]
    )


def attention_output(layer, dims: Dims, q, keys, values, mask):
    """The attention block's output (N, L, H), to be added to the residual: queries (N, heads, L, d) over
    keys and values (N, kv heads, K, d), each key/value head shared by heads / kv heads query heads;
    mask (N, 1, L, K) float, `additive` of the positions each query may attend to."""
    import torch.nn.functional as F

    share = dims.heads // dims.kv_heads
    if share > 1:
        keys, values = keys.repeat_interleave(share, dim=1), values.repeat_interleave(share, dim=1)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=dims.scale)
    return layer.self_attn.o_proj(out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1))


def mlp_residual(layer, dims: Dims, hidden):
    """hidden (N, L, H) + the layer's SiLU-gated MLP of its post-attention norm."""
    import torch.nn.functional as F

    x = rms_norm(hidden, layer.post_attention_layernorm.weight, dims.eps)
    mlp = layer.mlp
    return hidden + mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))


def head_logits(model, dims: Dims, hidden):
    """Logits (..., V) of final hidden states (..., H): the final norm, then the head."""
    return model.lm_head(rms_norm(hidden, model.model.norm.weight, dims.eps))


def causal_forward(model, input_ids, attention=None):
    """Logits (N, L, V) of left-padded rows (N, L) with attention (N, L) (1 = real token; None = all real),
    as transformers' forward computes them; a pad row attends to itself only (its logits are never read)."""
    dims = Dims(model.config)
    attention = torch.ones_like(input_ids) if attention is None else attention
    cos, sin = rotary_tables(dims, left_padded_positions(attention))
    mask = left_padded_mask(attention)
    hidden = model.model.embed_tokens(input_ids)
    for layer in model.model.layers:
        q, k, v = attention_inputs(layer, dims, hidden, cos, sin)
        hidden = mlp_residual(layer, dims, hidden + attention_output(layer, dims, q, k, v, mask))
    return head_logits(model, dims, hidden)


# ---- the modules: transformers' parameter names ---------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))


class _Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * c.head_dim, c.hidden_size, bias=False)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)


class _Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = _Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size)
        self.post_attention_layernorm = RMSNorm(c.hidden_size)


class Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size, padding_idx=c.pad_token_id)
        self.layers = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size)


class TinyLlama(nn.Module):
    """A `LlamaForCausalLM`'s parameters under transformers' names (`model.layers.0.self_attn.q_proj.weight`,
    ...); `forward` is `causal_forward`, sampling `vpo.llama_sampler` and training `vpo.local.group_forward`,
    all with the block above."""

    def __init__(self, config: dict, generation_config: dict | None = None):
        super().__init__()
        self.config_dict = dict(config)
        self.generation_config_dict = dict(generation_config or {})
        c = SimpleNamespace(**config)
        dims = Dims(c)  # the sizes the block computes with, so the modules are built to match them
        c.head_dim, c.num_key_value_heads = dims.head_dim, dims.kv_heads
        self.config = c
        self.model = Body(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if config.get("tie_word_embeddings", True):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, attention_mask=None):
        """Logits (N, L, V) of left-padded input_ids (N, L)."""
        return causal_forward(self, input_ids, attention_mask)

    @classmethod
    def from_dir(cls, path: str | Path) -> "TinyLlama":
        from safetensors.torch import load_file

        path = Path(path)
        config = json.loads((path / "config.json").read_text())
        generation = path / "generation_config.json"
        model = cls(config, json.loads(generation.read_text()) if generation.is_file() else None)
        state = load_file(path / "model.safetensors")
        if "lm_head.weight" not in state and config.get("tie_word_embeddings", True):
            state["lm_head.weight"] = state["model.embed_tokens.weight"]
        model.load_state_dict(state, strict=True)
        return model

    def save_pretrained(self, path: str | Path) -> None:
        """config.json, generation_config.json and model.safetensors as transformers writes them."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(self.config_dict, indent=2, sort_keys=True) + "\n")
        if self.generation_config_dict:
            (path / "generation_config.json").write_text(json.dumps(self.generation_config_dict, indent=2) + "\n")
        state = {name: tensor.detach().contiguous() for name, tensor in self.state_dict().items()}
        if self.lm_head.weight is self.model.embed_tokens.weight:
            state.pop("lm_head.weight")  # tied: stored once, as transformers stores it
        save_file(state, path / "model.safetensors", metadata={"format": "pt"})


def load(path: str | Path):
    """(TinyLlama, TinyTokenizer) of a directory `is_tiny_llama_dir` accepts."""
    return TinyLlama.from_dir(path), TinyTokenizer(path)
