"""Log-probabilities of a step's responses, each prompt run once for its whole group (plain torch).

An RL step scores `prompts x rollouts` responses that share their group's prompt: 8 prompts of about
100 tokens, each with 8 responses of up to 120. transformers' forward over the packed
`[prompt][response]` rows computes every prompt 8 times, and its attention, quadratic in the row's
length, covers prompt x prompt 8 times too. Here each layer runs the prompts once (G rows), then
the responses (B rows), whose queries attend to their own prompt's keys and values (indexed, so the
gradient reaches the prompt's computation once per response) and to the response before them. The
network is the one `vpo.llama_sampler` runs (the `LlamaForCausalLM` as `build_model` makes it, its
weights read in place); the result equals transformers' forward on each prompt + response up to float
rounding (tests/test_group_forward.py compares values and gradients).

Shapes: G prompts, P prompt positions (left-padded), B responses, R response positions (right-padded),
V vocabulary, H hidden size.
"""

from __future__ import annotations

import math

from vpo.llama_sampler import inverse_frequencies, rms_norm, rotary_tables, rotate_half


def _attend(layer, n_heads: int, n_kv: int, head_dim: int, x, cos, sin):
    """Queries (N, heads, L, d), keys and values (N, kv heads, L, d) of one layer's attention, rotated."""
    batch, length, _ = x.shape
    attn = layer.self_attn
    q = attn.q_proj(x).view(batch, length, n_heads, head_dim).transpose(1, 2)
    k = attn.k_proj(x).view(batch, length, n_kv, head_dim).transpose(1, 2)
    v = attn.v_proj(x).view(batch, length, n_kv, head_dim).transpose(1, 2)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v


def _mlp(layer, hidden, eps: float):
    import torch.nn.functional as F

    x = rms_norm(hidden, layer.post_attention_layernorm.weight, eps)
    mlp = layer.mlp
    return hidden + mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))


def group_response_logprobs(model, prompt_ids, prompt_attention, group_of, response_ids, response_mask, *,
                            temperature: float = 1.0, with_entropy: bool = False):
    """Log-probabilities (B, R) of the response tokens, and entropies (B, R) if asked (else None).

    prompt_ids, prompt_attention: (G, P) long, left-padded; group_of: (B,) long, the prompt row of each
    response; response_ids: (B, R) long and response_mask (B, R), right-padded. Logits are divided by
    the sampling temperature (veRL's convention). Gradients flow to `model`'s parameters.
    """
    import torch
    import torch.nn.functional as F

    config = model.config
    n_heads, n_kv = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    groups = n_heads // n_kv
    eps = config.rms_norm_eps
    scale = 1.0 / math.sqrt(head_dim)
    n_prompts, width_p = prompt_ids.shape
    batch, width_r = response_ids.shape

    prompt_real = prompt_attention.bool()
    prompt_len = prompt_attention.sum(1)
    # transformers' positions for a left-padded row: tokens count from 0, pads sit at 1 (masked anyway)
    positions_p = (prompt_attention.long().cumsum(-1) - 1).masked_fill(~prompt_real, 1)
    positions_r = prompt_len[group_of, None] + torch.arange(width_r)[None]
    inv_freq = inverse_frequencies(config, head_dim)
    cos_p, sin_p = rotary_tables(inv_freq, positions_p)
    cos_r, sin_r = rotary_tables(inv_freq, positions_r)

    causal_p = torch.ones((width_p, width_p), dtype=torch.bool).tril()
    # a pad query attends to itself only (its output is never read; a row with no key would be NaN)
    mask_p = (causal_p[None, None] & prompt_real[:, None, None, :]) | torch.eye(width_p, dtype=torch.bool)[None, None]
    causal_r = torch.ones((width_r, width_r), dtype=torch.bool).tril()
    response_real = response_mask.bool()
    mask_r = torch.cat([prompt_real[group_of][:, None, None, :].expand(batch, 1, width_r, width_p),
                        causal_r[None, None] & response_real[:, None, None, :]], dim=-1)
    mask_r = mask_r | torch.cat([torch.zeros((width_r, width_p), dtype=torch.bool),
                                 torch.eye(width_r, dtype=torch.bool)], dim=-1)[None, None]

    embed = model.model.embed_tokens
    hidden_p, hidden_r = embed(prompt_ids), embed(response_ids)
    for layer in model.model.layers:
        q_p, k_p, v_p = _attend(layer, n_heads, n_kv, head_dim,
                                rms_norm(hidden_p, layer.input_layernorm.weight, eps), cos_p, sin_p)
        q_r, k_r, v_r = _attend(layer, n_heads, n_kv, head_dim,
                                rms_norm(hidden_r, layer.input_layernorm.weight, eps), cos_r, sin_r)
        keys = torch.cat([k_p[group_of], k_r], dim=2)
        values = torch.cat([v_p[group_of], v_r], dim=2)
        if groups > 1:
            k_p, v_p = k_p.repeat_interleave(groups, dim=1), v_p.repeat_interleave(groups, dim=1)
            keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
        out_p = F.scaled_dot_product_attention(q_p, k_p, v_p, attn_mask=mask_p, scale=scale)
        out_r = F.scaled_dot_product_attention(q_r, keys, values, attn_mask=mask_r, scale=scale)
        o_proj = layer.self_attn.o_proj
        hidden_p = _mlp(layer, hidden_p + o_proj(out_p.transpose(1, 2).reshape(n_prompts, width_p, -1)), eps)
        hidden_r = _mlp(layer, hidden_r + o_proj(out_r.transpose(1, 2).reshape(batch, width_r, -1)), eps)

    # the prompt's last position predicts the first response token; response position t predicts t + 1
    predicting = torch.cat([hidden_p[group_of, -1:], hidden_r[:, :-1]], dim=1)
    logits = model.lm_head(rms_norm(predicting, model.model.norm.weight, eps)).float() / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    token_logp = log_probs.gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return token_logp, None
    return token_logp, -(log_probs.exp() * log_probs).sum(-1)


class StepBatch:
    """One RL step's rollouts as the grouped forward reads them: `n` responses per prompt, prompt-major.

    prompts, prompt_attention: (G, P) long, left-padded; group_of: (B,) long; responses: (B, R) long and
    mask (B, R) float, right-padded (B = G * n).
    """

    def __init__(self, prompt_ids, response_ids, n: int, pad_id: int):
        import torch

        from vpo.generate import left_pad

        if len(response_ids) != len(prompt_ids) * n:
            raise ValueError(f"{len(response_ids)} responses for {len(prompt_ids)} prompts x {n}")
        self.n = n
        self.prompts, self.prompt_attention = left_pad(prompt_ids, pad_id)
        self.group_of = torch.arange(len(prompt_ids)).repeat_interleave(n)
        width = max(max(len(r) for r in response_ids), 1)
        self.responses = torch.full((len(response_ids), width), pad_id, dtype=torch.long)
        self.mask = torch.zeros((len(response_ids), width))
        for row, ids in enumerate(response_ids):
            self.responses[row, :len(ids)] = torch.tensor(list(ids), dtype=torch.long)
            self.mask[row, :len(ids)] = 1.0

    def logprobs(self, model, *, groups: slice = slice(None), temperature: float = 1.0, with_entropy: bool = False):
        """`group_response_logprobs` of the responses of prompts[groups] (whole groups, padding trimmed):
        log-probabilities and entropies (rows, R') where R' is the longest response among those rows."""
        start, stop, _ = groups.indices(len(self.prompts))
        rows = slice(start * self.n, stop * self.n)
        attention = self.prompt_attention[start:stop]
        first = int(attention.any(0).float().argmax())  # columns that are padding in every prompt go
        width = max(int(self.mask[rows].sum(1).max()), 1)
        return group_response_logprobs(
            model, self.prompts[start:stop, first:], attention[:, first:], self.group_of[rows] - start,
            self.responses[rows, :width], self.mask[rows, :width], temperature=temperature,
            with_entropy=with_entropy)
