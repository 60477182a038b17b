"""The CPU backend's tiny Llama models without transformers: load, hold and save them.

Importing transformers costs a job 0.7 s, its Llama classes (whose masking code imports torch._dynamo)
and `AutoTokenizer` about 3 s on this project's 2-core machine before any work, and every local
train, evaluation and search job paid it (about 40 per default run). A model directory as `vpo
base-model` and the local trainer write it is loaded here instead: a network `vpo.llama_sampler` and
`vpo.local.group_forward` compute exactly (a float32 `LlamaForCausalLM` with the default rotary
embedding, no biases, SiLU) with the same parameters under the same names in plain `torch.nn`
modules, and its word-level tokenizer through the `tokenizers` library with the project's chat
template. Saving writes the Hugging Face layout back (config.json, generation_config.json,
model.safetensors with tied weights stored once, the tokenizer files as they were), so merge,
evaluation and any transformers or vLLM reader see the files they read (tests/test_local_model.py).
Anything else is loaded by transformers (`vpo.generate.load_pretrained`).
"""

from __future__ import annotations

import json
import shutil
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


def computes_exactly(config: dict) -> bool:
    """True for a Llama config (config.json as a dict) whose network this module and the plain-torch
    sampler compute as transformers does (vpo.llama_sampler.supports says the same of a loaded model)."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {"rope_type": "default"}
    return (config.get("architectures") == ["LlamaForCausalLM"] and config.get("dtype", config.get("torch_dtype")) == "float32"
            and rope.get("rope_type", "default") == "default" and config.get("hidden_act") == "silu"
            and not config.get("attention_bias") and not config.get("mlp_bias")
            and config.get("pretraining_tp", 1) == 1)


def is_tiny_llama_dir(path: str | Path) -> bool:
    """A model directory this module loads: a config it computes exactly and the tiny models' tokenizer
    (a `tokenizers` file and the project's chat template)."""
    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text())
        template = (path / "chat_template.jinja").read_text()
    except (OSError, json.JSONDecodeError):
        return False
    return (computes_exactly(config) and template == CHAT_TEMPLATE and (path / "tokenizer.json").is_file()
            and (path / "model.safetensors").is_file())


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
        self.template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(self.chat_template)
        self.path = Path(path)
        self.backend = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        config = json.loads((self.path / "tokenizer_config.json").read_text())
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

    def apply_chat_template(self, conversation, add_generation_prompt: bool = False, tokenize: bool = False, **variables):
        text = self.template.render(messages=list(conversation), add_generation_prompt=add_generation_prompt,
                               **self.special_tokens, **variables)
        return self(text)["input_ids"] if tokenize else text

    def save_pretrained(self, path: str | Path) -> None:
        for name in TOKENIZER_FILES:
            shutil.copy2(self.path / name, Path(path) / name)


class RMSNorm(nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))


class Attention(nn.Module):
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


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size)
        self.post_attention_layernorm = RMSNorm(c.hidden_size)


class Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size, padding_idx=c.pad_token_id)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size)


class TinyLlama(nn.Module):
    """A `LlamaForCausalLM`'s parameters under transformers' names (`model.layers.0.self_attn.q_proj.weight`,
    ...); its computations are `vpo.llama_sampler` (sampling) and `vpo.local.group_forward` (training)."""

    def __init__(self, config: dict, generation_config: dict | None = None):
        super().__init__()
        self.config_dict = dict(config)
        self.generation_config_dict = dict(generation_config or {})
        c = SimpleNamespace(**config)
        c.head_dim = config.get("head_dim") or c.hidden_size // c.num_attention_heads
        c.num_key_value_heads = config.get("num_key_value_heads") or c.num_attention_heads
        self.config = c
        self.model = Body(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if config.get("tie_word_embeddings", True):
            self.lm_head.weight = self.model.embed_tokens.weight

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
