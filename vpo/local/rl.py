"""The policy-gradient pieces of the local trainer, as pure torch functions (veRL's semantics).

Shapes: B sequences, P prompt positions (left-padded), R response positions (right-padded),
V vocabulary. A rollout is `[pad.. prompt][response ..pad]`, so every response starts at column P.
"""

from __future__ import annotations

from typing import Sequence


def pack_rollouts(prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]], pad_id: int):
    """Pack B (prompt, response) pairs into tensors.

    Returns input_ids (B, P+R) long, attention_mask (B, P+R) long, position_ids (B, P+R) long,
    response_mask (B, R) float, and P (the prompt width).
    """
    import torch

    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(response_ids)} responses")
    width_p = max(len(p) for p in prompt_ids)
    width_r = max(max(len(r) for r in response_ids), 1)
    batch = len(prompt_ids)
    input_ids = torch.full((batch, width_p + width_r), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, width_p + width_r), dtype=torch.long)
    for row, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        input_ids[row, width_p - len(p):width_p] = torch.tensor(list(p), dtype=torch.long)
        attention[row, width_p - len(p):width_p] = 1
        if len(r):
            input_ids[row, width_p:width_p + len(r)] = torch.tensor(list(r), dtype=torch.long)
            attention[row, width_p:width_p + len(r)] = 1
    position_ids = (attention.cumsum(dim=1) - 1).clamp(min=0)
    response_mask = attention[:, width_p:].float()
    return input_ids, attention, position_ids, response_mask, width_p


def response_logprobs(model, input_ids, attention_mask, position_ids, width_p: int, *, temperature: float = 1.0,
                      with_entropy: bool = False):
    """Log-probabilities (B, R) of the response tokens under `model`, and optionally entropies (B, R).

    Logits at position t predict token t+1, so responses starting at column P are scored by the
    logits of columns P-1 .. P+R-2. Logits are divided by the sampling temperature, as in veRL.
    """
    import torch

    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False).logits
    logits = logits[:, width_p - 1:-1, :].float() / temperature
    targets = input_ids[:, width_p:]
    log_probs = torch.log_softmax(logits, dim=-1)
    token_logp = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return token_logp, None
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return token_logp, entropy


def masked_mean(values, mask):
    """Token-mean over the masked entries (veRL loss_agg_mode=token-mean); 0 for an empty mask."""
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_clip_loss(logp, old_logp, advantages, mask, *, clip_ratio: float = 0.2, clip_ratio_c: float = 3.0):
    """Dual-clip PPO policy loss, token-mean. logp/old_logp/mask (B, R); advantages (B,) or (B, R).

    Returns (loss scalar, clip fraction scalar, approx KL to the old policy scalar).
    """
    import torch

    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1).expand_as(logp)
    log_ratio = (logp - old_logp).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_ratio, 1.0 + clip_ratio)
    pg = torch.maximum(unclipped, clipped)
    # Dual clip: for negative advantages the loss is bounded by -A * clip_ratio_c.
    pg = torch.where(advantages < 0, torch.minimum(pg, -advantages * clip_ratio_c), pg)
    clip_frac = masked_mean((clipped > unclipped).float(), mask)
    approx_kl = masked_mean(-log_ratio, mask)
    return masked_mean(pg, mask), clip_frac, approx_kl


def low_var_kl(logp, ref_logp):
    """k3 estimator of KL(policy || reference) per token (B, R), clamped to [-10, 10] as in veRL."""
    import torch

    kl = (ref_logp - logp).clamp(-20.0, 20.0)
    return (torch.exp(kl) - kl - 1.0).clamp(-10.0, 10.0)
