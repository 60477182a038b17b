"""Batched sampling for the tiny Llama models of the CPU backend (vpo/local) in plain torch, with a preallocated
KV cache.

transformers' `model.generate` spends about 8 ms per decoding step on a 2-layer, 64-wide model,
almost all of it framework overhead (cache objects, mask builders, logits processors); the
arithmetic of a step is well under a millisecond. This sampler runs the same network (the weights
of the model given, read in place, through `vpo.tiny_llama`'s block) with a handful of tensor
operations per layer and step, and draws tokens as `generate` does: logits / temperature, top-k and top-p when set, one
`torch.multinomial` call per step over the whole batch, finished rows padded. With the same seed it
draws from the same random stream, so it samples the responses `generate` samples wherever the two
computations' float rounding does not move a draw across a bucket boundary (tests/test_llama_sampler.py
checks logits against transformers and the sequences on a seed).

`supports(model)` says whether a model is one it reproduces (the Llama family as `build_model`
makes it: default rotary embedding, no biases, SiLU MLP, float32 on the CPU); anything else is left
to `generate`.
"""

from __future__ import annotations


def supports(model) -> bool:
    """True for a `LlamaForCausalLM` (or vpo.tiny_llama's copy of one) this sampler computes exactly as
    transformers does."""
    import torch

    config = getattr(model, "config", None)
    if type(model).__name__ not in ("LlamaForCausalLM", "TinyLlama") or config is None:
        return False
    rope = getattr(config, "rope_parameters", None) or {"rope_type": "default"}
    weights = next(model.parameters())
    # float32 on the CPU only: in half precision transformers casts between steps in ways not mirrored
    # here (veRL's merged models are bfloat16: they keep `generate`)
    return (rope.get("rope_type", "default") == "default" and config.hidden_act == "silu"
            and not config.attention_bias and not config.mlp_bias and getattr(config, "pretraining_tp", 1) == 1
            and weights.device.type == "cpu" and weights.dtype == torch.float32)


class KVSampler:
    """The network of one Llama model (`TinyLlama` or transformers' `LlamaForCausalLM`), run step by step
    over a batch with a fixed-size cache, through `vpo.tiny_llama`'s block.

    cache: keys and values (layers, batch, kv heads, max_len, head_dim); positions follow transformers'
    rule for left padding (position = number of real tokens before, pads at position 1).
    """

    def __init__(self, model):
        from vpo.tiny_llama import Dims

        self.model = model
        self.layers = model.model.layers
        self.dims = Dims(model.config)

    def forward(self, tokens, positions, keys, values, start: int, allowed):
        """Logits (batch, vocab) of the last position after writing `tokens` (batch, length) into the
        cache at [start, start + length); `allowed` (batch, 1, length, start + length) masks attention."""
        from vpo.tiny_llama import attention_inputs, attention_output, head_logits, mlp_residual, rotary_tables

        hidden = self.model.model.embed_tokens(tokens)
        cos, sin = rotary_tables(self.dims, positions)
        end = start + tokens.shape[1]
        for i, layer in enumerate(self.layers):
            q, k, v = attention_inputs(layer, self.dims, hidden, cos, sin)
            keys[i, :, :, start:end] = k
            values[i, :, :, start:end] = v
            hidden = hidden + attention_output(layer, self.dims, q, keys[i, :, :, :end], values[i, :, :, :end], allowed)
            hidden = mlp_residual(layer, self.dims, hidden)
        return head_logits(self.model, self.dims, hidden[:, -1])


def _warp(logits, temperature: float, top_k: int, top_p: float):
    """generate's sampling warpers in its order: temperature, top-k, top-p (removed tokens -> -inf)."""
    import torch

    logits = logits / temperature
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]))[0][..., -1, None]
        logits = logits.masked_fill(logits < kth, -float("inf"))
    if top_p < 1.0:
        ordered, index = torch.sort(logits, descending=False)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - top_p)
        remove[..., -1:] = False  # keep at least one token
        logits = logits.masked_fill(remove.scatter(1, index, remove), -float("inf"))
    return logits


def sample_batch(model, input_ids, attention, *, max_new_tokens: int, eos: int, pad: int, temperature: float,
                 top_k: int, top_p: float):
    """Sampled continuations (batch, <= max_new_tokens) of a left-padded batch, as `generate` returns
    them past the prompt: rows that finished are padded with `pad`; stops when every row has
    finished. temperature 0 = greedy. input_ids, attention: (batch, prompt_len) long."""
    import torch

    from vpo.tiny_llama import left_padded_positions

    sampler = KVSampler(model)
    batch, prompt_len = input_ids.shape
    total = prompt_len + max_new_tokens
    shape = (len(sampler.layers), batch, sampler.dims.kv_heads, total, sampler.dims.head_dim)
    dtype = model.model.embed_tokens.weight.dtype
    keys, values = torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)
    real = torch.zeros((batch, total), dtype=torch.bool)
    real[:, :prompt_len] = attention.bool()
    positions = left_padded_positions(attention)
    causal = torch.ones((prompt_len, prompt_len), dtype=torch.bool).tril()
    allowed = causal[None, None] & real[:, None, None, :prompt_len]
    allowed = allowed | torch.eye(prompt_len, dtype=torch.bool)[None, None]  # a pad row attends to itself
    next_position = positions[:, -1] + 1
    unfinished = torch.ones(batch, dtype=torch.bool)
    out = torch.full((batch, max_new_tokens), pad, dtype=torch.long)
    with torch.no_grad():
        logits = sampler.forward(input_ids, positions, keys, values, 0, allowed)
        for step in range(max_new_tokens):
            if temperature == 0:
                token = logits.argmax(dim=-1)
            else:
                probs = _warp(logits.float(), temperature, top_k, top_p).softmax(dim=-1)
                token = torch.multinomial(probs, num_samples=1).squeeze(1)
            token = torch.where(unfinished, token, torch.full_like(token, pad))
            out[:, step] = token
            unfinished &= token != eos
            if not unfinished.any() or step == max_new_tokens - 1:
                return out[:, :step + 1]
            at = prompt_len + step
            real[:, at] = True
            logits = sampler.forward(token[:, None], next_position[:, None], keys, values, at,
                                     real[:, None, None, :at + 1])
            next_position = next_position + 1
    return out
