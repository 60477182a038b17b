"""Log-probabilities of a step's responses, each prompt run once for its whole group (plain torch).

An RL step scores `prompts x rollouts` responses that share their group's prompt: 8 prompts of about
100 tokens, each with 8 responses of up to 120. transformers' forward over the packed
`[prompt][response]` rows computes every prompt 8 times, and its attention, quadratic in the row's
length, covers prompt x prompt 8 times too. Here each layer runs the prompts once (G rows), then
the responses (B rows), whose queries attend to their own prompt's keys and values (indexed, so the
gradient reaches the prompt's computation once per response) and to the response before them. The
network is `vpo.tiny_llama`'s block, as the sampler runs it (its weights read in place); the result
equals transformers' forward on each prompt + response up to float rounding (tests/test_group_forward.py
compares values and gradients).

Shapes: G prompts, P prompt positions (left-padded), B responses, R response positions (right-padded),
V vocabulary, H hidden size.
"""

from __future__ import annotations


def group_response_logprobs(model, prompt_ids, prompt_attention, group_of, response_ids, response_mask, *,
                            temperature: float = 1.0, with_entropy: bool = False):
    """Log-probabilities (B, R) of the response tokens, and entropies (B, R) if asked (else None).

    prompt_ids, prompt_attention: (G, P) long, left-padded; group_of: (B,) long, the prompt row of each
    response; response_ids: (B, R) long and response_mask (B, R), right-padded. Logits are divided by
    the sampling temperature (veRL's convention). Gradients flow to `model`'s parameters.
    """
    import torch

    from vpo.tiny_llama import (Dims, additive, attention_inputs, attention_output, head_logits,
                                left_padded_mask, left_padded_positions, mlp_residual, rotary_tables)

    dims = Dims(model.config)
    width_p = prompt_ids.shape[1]
    batch, width_r = response_ids.shape

    prompt_real = prompt_attention.bool()
    positions_r = prompt_attention.sum(1)[group_of, None] + torch.arange(width_r)[None]
    cos_p, sin_p = rotary_tables(dims, left_padded_positions(prompt_attention))
    cos_r, sin_r = rotary_tables(dims, positions_r)

    mask_p = left_padded_mask(prompt_attention)
    causal_r = torch.ones((width_r, width_r), dtype=torch.bool).tril()
    response_real = response_mask.bool()
    mask_r = torch.cat([prompt_real[group_of][:, None, None, :].expand(batch, 1, width_r, width_p),
                        causal_r[None, None] & response_real[:, None, None, :]], dim=-1)
    # a pad query attends to itself only (its output is never read; a row with no key would be NaN)
    mask_r = mask_r | torch.cat([torch.zeros((width_r, width_p), dtype=torch.bool),
                                 torch.eye(width_r, dtype=torch.bool)], dim=-1)[None, None]
    mask_r = additive(mask_r)

    embed = model.model.embed_tokens
    hidden_p, hidden_r = embed(prompt_ids), embed(response_ids)
    for layer in model.model.layers:
        q_p, k_p, v_p = attention_inputs(layer, dims, hidden_p, cos_p, sin_p)
        q_r, k_r, v_r = attention_inputs(layer, dims, hidden_r, cos_r, sin_r)
        keys = torch.cat([k_p[group_of], k_r], dim=2)
        values = torch.cat([v_p[group_of], v_r], dim=2)
        hidden_p = mlp_residual(layer, dims, hidden_p + attention_output(layer, dims, q_p, k_p, v_p, mask_p))
        hidden_r = mlp_residual(layer, dims, hidden_r + attention_output(layer, dims, q_r, keys, values, mask_r))

    # the prompt's last position predicts the first response token; response position t predicts t + 1
    predicting = torch.cat([hidden_p[group_of, -1:], hidden_r[:, :-1]], dim=1)
    logits = head_logits(model, dims, predicting).float() / temperature
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
