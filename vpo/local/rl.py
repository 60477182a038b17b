"""The policy-gradient pieces of the local trainer, as pure torch functions (veRL's semantics).

Shapes: B responses, R response positions (right-padded); the log-probabilities come from
vpo/local/group_forward.py.
"""

from __future__ import annotations


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
