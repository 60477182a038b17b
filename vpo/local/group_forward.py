"""Log-probabilities of a step's responses, each prompt run once for its whole group (plain torch).

An RL step scores `prompts x rollouts` responses that share their group's prompt: 8 prompts of about
100 tokens, each with 8 responses of up to 120. transformers' forward over the packed
`[prompt][response]` rows computes every prompt 8 times, and its attention, quadratic in the row's
length, covers prompt x prompt 8 times too. Here each layer runs the prompts once (G rows), then
the responses (B rows), whose queries attend to their own prompt's keys and values (indexed, so the
gradient reaches the prompt's computation once per response) and to the response before them. The
responses run in three buckets by length, each padded to its own longest: a trained multi-answer
policy's responses average about 60 of their 120 tokens, and one row at the limit would pad all 64
(an update of 64 responses of 5 to 120 tokens: 0.26 s in one batch, 0.16 s in three, one core). The
network is `vpo.tiny_llama`'s block, as the sampler runs it (its weights read in place); the result
equals transformers' forward on each prompt + response up to float rounding (tests/test_group_forward.py
compares values and gradients).

Shapes: G prompts, P prompt positions (left-padded), B responses, R response positions (right-padded),
V vocabulary, H hidden size.
"""

from __future__ import annotations

from vpo.generate import left_pad


def group_response_logprobs(
    model,
    prompt_ids,
    prompt_attention,
    group_of,
    response_ids,
    response_mask,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    buckets: int = 3,
):
    """Log-probabilities (B, R) of the response tokens, and entropies (B, R) if asked (else None).

    prompt_ids, prompt_attention: (G, P) long, left-padded; group_of: (B,) long, the prompt row of each
    response; response_ids: (B, R) long and response_mask (B, R), right-padded. Logits are divided by
    the sampling temperature (veRL's convention). Gradients flow to `model`'s parameters. The responses
    run in `buckets` batches by length (the shortest rows first), each padded only to its own longest:
    an RL step's responses run from a few tokens to the limit, and one long row would pad every row.
    """
    import torch

    from vpo.tiny_llama import (
        Dims,
        attention_inputs,
        attention_output,
        left_padded_mask,
        left_padded_positions,
        mlp_residual,
        rotary_tables,
    )

    dims = Dims(model.config)
    cos_p, sin_p = rotary_tables(dims, left_padded_positions(prompt_attention))
    mask_p = left_padded_mask(prompt_attention)
    lengths = response_mask.sum(1)
    order = torch.argsort(lengths, stable=True)
    rows = [part for part in order.tensor_split(buckets) if len(part)]
    parts = [
        _ResponseRows(
            dims, prompt_attention, group_of[r], response_ids[r], response_mask[r], max(int(lengths[r].max()), 1)
        )
        for r in rows
    ]
    hidden_p = model.model.embed_tokens(prompt_ids)
    for part in parts:
        part.hidden = model.model.embed_tokens(part.ids)
    for layer in model.model.layers:
        q_p, k_p, v_p = attention_inputs(layer, dims, hidden_p, cos_p, sin_p)
        for part in parts:
            q_r, k_r, v_r = attention_inputs(layer, dims, part.hidden, part.cos, part.sin)
            keys = torch.cat([k_p[part.group_of], k_r], dim=2)
            values = torch.cat([v_p[part.group_of], v_r], dim=2)
            part.hidden = mlp_residual(
                layer, dims, part.hidden + attention_output(layer, dims, q_r, keys, values, part.mask)
            )
        hidden_p = mlp_residual(layer, dims, hidden_p + attention_output(layer, dims, q_p, k_p, v_p, mask_p))

    width = response_ids.shape[1]
    outputs = [part.logprobs(model, dims, hidden_p, temperature, with_entropy, width) for part in parts]
    back = torch.argsort(torch.cat(rows))  # from length order to the rows' own
    token_logp = torch.cat([logp for logp, _ in outputs])[back]
    return token_logp, (torch.cat([entropy for _, entropy in outputs])[back] if with_entropy else None)


class _ResponseRows:
    """Some responses of `group_response_logprobs`, trimmed to their longest (`width` positions): their
    tokens, prompt rows, rotary tables, attention mask, and hidden states as the layers update them."""

    def __init__(self, dims, prompt_attention, group_of, ids, mask, width: int):
        import torch

        from vpo.tiny_llama import additive, rotary_tables

        self.group_of, self.ids = group_of, ids[:, :width]
        batch, width_p = len(group_of), prompt_attention.shape[1]
        positions = prompt_attention.sum(1)[group_of, None] + torch.arange(width)[None]
        self.cos, self.sin = rotary_tables(dims, positions)
        causal = torch.ones((width, width), dtype=torch.bool).tril()
        real = mask[:, :width].bool()
        allowed = torch.cat(
            [
                prompt_attention.bool()[group_of][:, None, None, :].expand(batch, 1, width, width_p),
                causal[None, None] & real[:, None, None, :],
            ],
            dim=-1,
        )
        # a pad query attends to itself only (its output is never read; a row with no key would be NaN)
        allowed = (
            allowed
            | torch.cat([torch.zeros((width, width_p), dtype=torch.bool), torch.eye(width, dtype=torch.bool)], dim=-1)[
                None, None
            ]
        )
        self.mask = additive(allowed)
        self.hidden = None

    def logprobs(self, model, dims, hidden_p, temperature: float, with_entropy: bool, width: int):
        """(log-probabilities, entropies or None) of these rows' tokens, (rows, width), zero past their own
        width: the prompt's last position predicts the first response token, position t predicts t + 1."""
        import torch
        import torch.nn.functional as F

        from vpo.tiny_llama import head_logits

        predicting = torch.cat([hidden_p[self.group_of, -1:], self.hidden[:, :-1]], dim=1)
        log_probs = torch.log_softmax(head_logits(model, dims, predicting).float() / temperature, dim=-1)
        token_logp = log_probs.gather(-1, self.ids.unsqueeze(-1)).squeeze(-1)
        pad = (0, width - token_logp.shape[1])
        if not with_entropy:
            return F.pad(token_logp, pad), None
        return F.pad(token_logp, pad), F.pad(-(log_probs.exp() * log_probs).sum(-1), pad)


class StepBatch:
    """One RL step's rollouts as the grouped forward reads them: `n` responses per prompt, prompt-major.

    prompts, prompt_attention: (G, P) long, left-padded; group_of: (B,) long; responses: (B, R) long and
    mask (B, R) float, right-padded (B = G * n).
    """

    def __init__(self, prompt_ids, response_ids, n: int, pad_id: int):
        import torch

        if len(response_ids) != len(prompt_ids) * n:
            raise ValueError(f"{len(response_ids)} responses for {len(prompt_ids)} prompts x {n}")
        self.n = n
        self.prompts, self.prompt_attention = left_pad(prompt_ids, pad_id)
        self.group_of = torch.arange(len(prompt_ids)).repeat_interleave(n)
        width = max(max(len(r) for r in response_ids), 1)
        self.responses = torch.full((len(response_ids), width), pad_id, dtype=torch.long)
        self.mask = torch.zeros((len(response_ids), width))
        for row, ids in enumerate(response_ids):
            self.responses[row, : len(ids)] = torch.tensor(list(ids), dtype=torch.long)
            self.mask[row, : len(ids)] = 1.0

    def logprobs(self, model, *, groups: slice = slice(None), temperature: float = 1.0, with_entropy: bool = False):
        """`group_response_logprobs` of the responses of prompts[groups] (whole groups, padding trimmed):
        log-probabilities and entropies (rows, R') where R' is the longest response among those rows."""
        start, stop, _ = groups.indices(len(self.prompts))
        rows = slice(start * self.n, stop * self.n)
        attention = self.prompt_attention[start:stop]
        first = int(attention.any(0).float().argmax())  # columns that are padding in every prompt go
        width = max(int(self.mask[rows].sum(1).max()), 1)
        return group_response_logprobs(
            model,
            self.prompts[start:stop, first:],
            attention[:, first:],
            self.group_of[rows] - start,
            self.responses[rows, :width],
            self.mask[rows, :width],
            temperature=temperature,
            with_entropy=with_entropy,
        )
