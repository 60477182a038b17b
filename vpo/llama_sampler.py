"""Batched sampling for the tiny Llama models of the CPU backend (vpo/local) in plain torch: each
prompt's keys and values computed once for its whole group of rollouts, the rollouts' own in a
preallocated cache.

transformers' `model.generate` spends about 8 ms per decoding step on a 2-layer, 64-wide model,
almost all of it framework overhead (cache objects, mask builders, logits processors); the
arithmetic of a step is well under a millisecond. An RL step samples n rollouts of each prompt:
`generate` runs every prompt n times and its attention reads n copies of the prompt's cache at every
step. Here the prompts run once (G rows); at each decoding step the B = G x n rollouts' queries
attend to their group's prompt keys in one batched product per group and to their own earlier
tokens, with the projections fused (q, k, v in one product; gate and up in one) so a step is a
few dozen torch operations (benchmarks/rl_step.py counts them). A rollout that has finished decodes on
(its tokens are pads) until at most a quarter of the batch is left: a trained multi-answer policy's
rollouts end after 45 to 80 of their 120 tokens, a few run to the limit, and the last 40 steps would
read every finished row's cache. The few left each get a copy of their prompt's keys and values and
decode alone (`keep`), and drop again whenever a quarter of them finish. The network is `vpo.tiny_llama`'s,
its weights read from the model given. Tokens are drawn from the distribution `generate` draws from
(logits / temperature, top-k and top-p when set), but each from one uniform number (`draw`: the first
token whose cumulative probability reaches it), where `generate`'s `torch.multinomial` draws V
exponentials per row: 0.04 against 0.24 ms a decoding step of 64 rollouts, a fifth of a multi-answer
RL step's generation. So the sampler and `generate` draw other tokens on one seed and the same ones in
distribution (tests/test_llama_sampler.py: the network's logits against transformers', greedy
sequences equal, sampled ones by chi-square tests); one seed still gives one sample.

`supports(model)` says whether a model is one it reproduces (the Llama family as `build_model`
makes it: default rotary embedding, no biases, SiLU MLP, float32 on the CPU); anything else is left
to `generate`.

Shapes: G prompts, P prompt positions (left-padded), n rollouts per prompt, B = G x n rollouts
(prompt-major), T new tokens, H hidden size, V vocabulary, heads = kv heads x share queries of size d.
"""

from __future__ import annotations


def supports(model) -> bool:
    """True for a `LlamaForCausalLM` (or vpo.tiny_llama's copy of one) this sampler computes exactly as
    transformers does: `vpo.tiny_llama.standard_block`, float32 weights on the CPU."""
    import torch

    from vpo.tiny_llama import standard_block

    config = getattr(model, "config", None)
    if type(model).__name__ not in ("LlamaForCausalLM", "TinyLlama") or config is None:
        return False
    as_dict = config.to_dict() if hasattr(config, "to_dict") else model.config_dict
    weights = next(model.parameters())
    # float32 on the CPU only: in half precision transformers casts between steps in ways not mirrored
    # here (veRL's merged models are bfloat16: they keep `generate`)
    return standard_block(as_dict) and weights.device.type == "cpu" and weights.dtype == torch.float32


class GroupedDecoder:
    """The network of one Llama model (`TinyLlama` or transformers' `LlamaForCausalLM`) over G prompts
    and their B = G x n rollouts: `prefill` runs the prompts once and keeps their keys and values
    (layers, G, kv heads, P, d); `step` feeds one token per rollout, whose keys and values go to the
    rollouts' cache (layers, B, kv heads, T, d), and returns the next logits (B, V).

    Positions follow transformers' rule for left padding (a rollout's first token sits at its prompt's
    number of real tokens). Every rollout attends to all of its earlier tokens, finished or not (their
    outputs are padded away, as `generate` pads them).
    """

    def __init__(self, model, n: int, max_new_tokens: int):
        import torch

        from vpo.tiny_llama import Dims

        self.model, self.n, self.dims = model, n, Dims(model.config)
        self.layers = model.model.layers
        d = self.dims
        self.share = d.heads // d.kv_heads
        self.widths = (d.heads * d.head_dim, d.kv_heads * d.head_dim)  # queries, keys (= values)
        # each layer's products, fused and transposed once: x @ qkv gives q, k, v and rotate_half(q),
        # rotate_half(k) (the rotation folded into the weights: rows swapped in halves and one half
        # negated, which is exact); x @ gate_up gives the MLP's gate and up
        self.qkv, self.gate_up, self.out, self.down = [], [], [], []
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            qk = torch.cat([attn.q_proj.weight, attn.k_proj.weight])
            halves = qk.view(d.heads + d.kv_heads, 2, d.head_dim // 2, -1)
            rotated = torch.cat([-halves[:, 1:], halves[:, :1]], dim=1).reshape(qk.shape)
            self.qkv.append(torch.cat([qk, attn.v_proj.weight, rotated]).t().contiguous())
            self.gate_up.append(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).t().contiguous())
            self.out.append(attn.o_proj.weight.t().contiguous())
            self.down.append(mlp.down_proj.weight.t().contiguous())
        self.head = model.lm_head.weight.t().contiguous()
        self.max_new_tokens = max_new_tokens

    def prefill(self, input_ids, attention):
        """Logits (B, V) of each rollout's first token, from the prompts input_ids, attention (G, P) long."""
        import torch

        from vpo.tiny_llama import (
            additive,
            attention_inputs,
            attention_output,
            head_logits,
            left_padded_mask,
            left_padded_positions,
            mlp_residual,
            rotary_tables,
        )

        d, n = self.dims, self.n
        groups, width = input_ids.shape
        batch = groups * n
        positions = left_padded_positions(attention)
        cos, sin = rotary_tables(d, positions)
        mask = left_padded_mask(attention)
        hidden = self.model.model.embed_tokens(input_ids)
        self.prompt_keys, self.prompt_values = [], []
        for layer in self.layers:
            q, k, v = attention_inputs(layer, d, hidden, cos, sin)
            # contiguous once here, not copied by every step's product
            self.prompt_keys.append(k.transpose(-1, -2).reshape(groups * d.kv_heads, d.head_dim, width).contiguous())
            self.prompt_values.append(v.reshape(groups * d.kv_heads, width, d.head_dim).contiguous())
            hidden = mlp_residual(layer, d, hidden + attention_output(layer, d, q, k, v, mask))
        # the prompts' pads are never attended to by a rollout
        bias = additive(attention.bool()[:, None, None, :])  # (G, 1, 1, P)
        self.prompt_bias = bias.expand(groups, d.kv_heads, 1, width).reshape(groups * d.kv_heads, 1, width)
        # the rollouts' own keys (transposed: ready for q @ k) and values; read only where written
        cache = (len(self.layers), batch, d.kv_heads)
        self.keys = torch.empty(cache + (d.head_dim, self.max_new_tokens))
        self.values = torch.empty(cache + (self.max_new_tokens, d.head_dim))
        # rotary tables of every new position: rollout b's token t sits at its prompt's real length + t
        first = attention.sum(1).repeat_interleave(n)
        cos, sin = rotary_tables(d, first[:, None] + torch.arange(self.max_new_tokens)[None])
        self.cos, self.sin = cos[:, 0], sin[:, 0]  # (B, T, d)
        self.groups = groups
        self.rows = None  # the per-row caches of the rollouts kept, once `keep` has run (else the grouped ones)
        return head_logits(self.model, d, hidden[:, -1]).repeat_interleave(n, dim=0)

    def keep(self, kept):
        """Decode only the rollouts `kept` (long, indices into those decoded now) from here on, each with its
        own copy of its prompt's keys and values: for a few rollouts, reading their own copies costs less
        than the grouped products over every prompt's group."""
        import torch

        if self.rows is None:
            g, d, width = self.groups, self.dims, self.prompt_keys[0].shape[-1]
            prompt = torch.arange(g).repeat_interleave(self.n)[kept]
            self.rows = _RowCaches(
                [k.view(g, d.kv_heads, d.head_dim, width)[prompt] for k in self.prompt_keys],
                [v.view(g, d.kv_heads, width, d.head_dim)[prompt] for v in self.prompt_values],
                self.prompt_bias.view(g, d.kv_heads, 1, width)[prompt],
                self.keys[:, kept],
                self.values[:, kept],
            )
        else:
            self.rows.keep(kept)
        self.cos, self.sin = self.cos[kept], self.sin[kept]

    def step(self, token, t: int):
        """Logits (B, V) after feeding token (B,) long at new position t (after `keep`: (b, V) of the b
        rollouts kept, token (b,))."""
        import torch

        from vpo.tiny_llama import rms_norm

        d, n, groups = self.dims, self.n, self.groups
        batch, kv, share, size = token.shape[0], d.kv_heads, self.share, d.head_dim
        q_width, k_width = self.widths
        rotated_from = q_width + 2 * k_width
        cos, sin = self.cos[:, t : t + 1], self.sin[:, t : t + 1]  # (B, 1, d)
        hidden = self.model.model.embed_tokens(token)
        for i, layer in enumerate(self.layers):
            qkv = rms_norm(hidden, layer.input_layernorm.weight, d.eps) @ self.qkv[i]
            qk = (
                qkv[:, : q_width + k_width].view(batch, d.heads + kv, size) * cos
                + qkv[:, rotated_from:].view(batch, d.heads + kv, size) * sin
            )
            value = qkv[:, q_width + k_width : rotated_from].view(batch, kv, size)
            q = qk[:, : d.heads] * d.scale  # (B, heads, d) = (G, n, kv, share, d)
            if self.rows is not None:
                heard = self.rows.attend(i, t, q.view(batch * kv, share, size), qk[:, d.heads :], value)
                hidden = hidden + heard.view(batch, d.heads * size) @ self.out[i]
                hidden = hidden + self._mlp(i, layer, hidden)
                continue
            self.keys[i, :, :, :, t] = qk[:, d.heads :]
            self.values[i, :, :, t] = value
            # the group's prompt: queries (G x kv, n x share, d) against its keys (G x kv, d, P)
            grouped = q.view(groups, n, kv, share, size).transpose(1, 2).reshape(groups * kv, n * share, size)
            over_prompt = torch.baddbmm(self.prompt_bias, grouped, self.prompt_keys[i])
            width = over_prompt.shape[-1]
            over_prompt = over_prompt.view(groups, kv, n, share, width).transpose(1, 2).reshape(batch, kv, share, width)
            over_own = q.view(batch, kv, share, size) @ self.keys[i, :, :, :, : t + 1]
            weights = torch.cat([over_prompt, over_own], dim=-1).softmax(dim=-1)
            from_prompt = weights[..., :width].reshape(groups, n, kv, share, width).transpose(1, 2)
            from_prompt = from_prompt.reshape(groups * kv, n * share, width).bmm(self.prompt_values[i])
            from_prompt = from_prompt.view(groups, kv, n, share, size).transpose(1, 2).reshape(batch, d.heads * size)
            from_own = (weights[..., width:] @ self.values[i, :, :, : t + 1]).view(batch, d.heads * size)
            hidden = hidden + (from_prompt + from_own) @ self.out[i]
            hidden = hidden + self._mlp(i, layer, hidden)
        return rms_norm(hidden, self.model.model.norm.weight, d.eps) @ self.head

    def _mlp(self, i: int, layer, hidden):
        """Layer i's MLP of its post-attention norm of hidden (b, H)."""
        import torch.nn.functional as F

        from vpo.tiny_llama import rms_norm

        gate, up = (rms_norm(hidden, layer.post_attention_layernorm.weight, self.dims.eps) @ self.gate_up[i]).chunk(
            2, dim=-1
        )
        return (F.silu(gate) * up) @ self.down[i]


class _RowCaches:
    """The keys and values of a few rollouts, each its own: (b, kv heads, d, P + T) keys (transposed) and
    (b, kv heads, P + T, d) values per layer, its prompt's first, then its own tokens; bias (b, kv heads,
    1, P + T) 0 or -inf (the prompts' pads)."""

    def __init__(self, prompt_keys, prompt_values, prompt_bias, own_keys, own_values):
        import torch

        rows, kv, size, width = prompt_keys[0].shape
        self.width, span = width, width + own_keys.shape[-1]
        self.keys = [torch.cat([p, own], dim=-1) for p, own in zip(prompt_keys, own_keys)]
        self.values = [torch.cat([p, own], dim=-2) for p, own in zip(prompt_values, own_values)]
        self.bias = torch.zeros((rows, kv, 1, span))
        self.bias[..., :width] = prompt_bias

    def keep(self, kept):
        """Only the rows `kept` (long) from here on."""
        self.keys = [k[kept] for k in self.keys]
        self.values = [v[kept] for v in self.values]
        self.bias = self.bias[kept]

    def attend(self, i: int, t: int, q, key, value):
        """Layer i's attention output (b x kv heads, share, d) of queries q (b x kv heads, share, d) at new
        position t, whose key and value (b, kv heads, d) go to the cache first."""
        import torch

        rows, kv, size, _ = self.keys[i].shape
        seen = self.width + t + 1
        self.keys[i][..., seen - 1] = key
        self.values[i][:, :, seen - 1] = value
        keys = self.keys[i].view(rows * kv, size, -1)[..., :seen]
        bias = self.bias[..., :seen].reshape(rows * kv, 1, seen)
        weights = torch.baddbmm(bias, q, keys).softmax(dim=-1)
        return weights.bmm(self.values[i].view(rows * kv, -1, size)[:, :seen])


def _warp(logits, temperature: float, top_k: int, top_p: float):
    """generate's sampling warpers in its order: temperature, top-k, top-p (removed tokens -> -inf)."""
    import torch

    if temperature != 1.0:  # generate leaves out its temperature warper at 1 (dividing by 1 changes nothing)
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


def draw(probs):
    """One token per row of probs (b, V) (rows summing to 1, up to rounding), each drawn with its row's
    probabilities from one uniform number: the first token whose cumulative probability reaches
    (1 - u) x the row's total, u uniform on [0, 1). The threshold is above 0 and at most the total, so a
    token of probability 0 (removed by top-k or top-p) is never drawn. The sums are float32, as the
    probabilities are: a token's share moves by at most the rounding of the sum it is added to (about 1e-7
    of the row's total, as in `torch.multinomial`'s own float arithmetic). `torch.multinomial` draws V
    exponentials per row instead, most of a decoding step's sampling time."""
    import torch

    cumulative = probs.cumsum(dim=-1)
    threshold = (1.0 - torch.rand((probs.shape[0], 1))) * cumulative[:, -1:]
    return torch.searchsorted(cumulative, threshold).squeeze(1)


def sample_groups(
    model,
    input_ids,
    attention,
    n: int,
    *,
    max_new_tokens: int,
    eos: int,
    pad: int,
    temperature: float,
    top_k: int,
    top_p: float,
):
    """Sampled continuations (G x n, <= max_new_tokens) of n rollouts of each left-padded prompt
    (input_ids, attention: (G, P) long), prompt-major, as `generate` returns them past the prompt for
    the prompts repeated n times each, drawn from its distribution (`draw`): rows that finished are
    padded with `pad`; stops when every row has finished. temperature 0 = greedy."""
    import torch

    # inference mode, not only no_grad: no autograd bookkeeping on any tensor, 10% off a step's dispatch
    with torch.inference_mode():
        decoder = GroupedDecoder(model, n, max_new_tokens)
        batch = input_ids.shape[0] * n
        running = torch.ones(batch, dtype=torch.bool)
        padding = torch.full((batch,), pad, dtype=torch.long)
        out = torch.full((batch, max_new_tokens), pad, dtype=torch.long)
        logits = decoder.prefill(input_ids, attention)
        decoded = None  # the rows of `out` the decoder still runs, in its order (None: all of them)
        for step in range(max_new_tokens):
            if temperature == 0:
                drawn = logits.argmax(dim=-1)
            else:
                drawn = draw(_warp(logits, temperature, top_k, top_p).softmax(dim=-1))
            if decoded is None:
                token = torch.where(running, drawn, padding)
            else:
                token = padding.clone()
                token[decoded] = torch.where(running[decoded], drawn, padding[decoded])
            out[:, step] = token
            running &= token != eos
            if not running.any() or step == max_new_tokens - 1:
                return out[:, : step + 1]
            going = running if decoded is None else running[decoded]
            left = int(going.sum())
            # finished rows decode on (pads, unread) until at most a quarter of the rollouts are left, then
            # the decoder keeps only those left, and drops rows again each time a quarter of them finish
            if 4 * left <= batch and 4 * (len(going) - left) >= len(going):
                kept = going.nonzero().squeeze(1)
                decoder.keep(kept)
                decoded = kept if decoded is None else decoded[kept]
            logits = decoder.step(token if decoded is None else token[decoded], step)
    return out
