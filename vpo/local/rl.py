"""The policy-gradient pieces of the local trainer, as pure torch functions (veRL's semantics).

Shapes: B responses, R response positions (right-padded); the log-probabilities come from
vpo/local/group_forward.py.
"""

from __future__ import annotations

from vpo.local.adamw import AdamW


def masked_mean(values, mask):
    """Token-mean over the masked entries (veRL loss_agg_mode=token-mean); 0 for an empty mask."""
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_clip_loss(logp, old_logp, advantages, mask, *, clip_ratio: float, clip_ratio_c: float):
    """Dual-clip PPO policy loss, token-mean. logp/old_logp/mask (B, R); advantages (B,) or (B, R).

    Returns (loss scalar, clip fraction scalar, approx KL to the old policy scalar).
    """
    import torch

    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)
    log_ratio = (logp - old_logp).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_ratio, 1.0 + clip_ratio)
    pg = torch.maximum(unclipped, clipped)
    # Dual clip: for negative advantages the loss is bounded by -A * clip_ratio_c.
    negative = advantages < 0
    pg = torch.where(negative, torch.minimum(pg, -advantages * clip_ratio_c), pg)
    clip_frac = masked_mean((clipped > unclipped).float(), mask)
    approx_kl = masked_mean(-log_ratio, mask)
    return masked_mean(pg, mask), clip_frac, approx_kl


def low_var_kl(logp, ref_logp):
    """k3 estimator of KL(policy || reference) per token (B, R), at most 10, as veRL computes it (veRL clamps
    the log-ratio to [-20, 20] and the result to [-10, 10]; k3 is never negative, and past a log-ratio of
    2.62 the result's bound binds first, so only the log-ratio's upper bound matters, for exp to stay finite:
    the same values and gradients)."""
    import torch

    log_ratio = (ref_logp - logp).clamp(max=20.0)
    return (torch.exp(log_ratio) - log_ratio - 1.0).clamp(max=10.0)


def optimizer_for(policy, settings):
    """The policy's optimizer: AdamW at a constant learning rate, betas (0.9, 0.999), eps 1e-8 and the
    settings' weight decay (veRL's actor optimizer, torch's AdamW, with `lr_scheduler_type: constant` and
    no warmup; vpo/local/adamw.py computes torch's AdamW update to the same floats)."""
    adam = {"betas": (0.9, 0.999), "eps": 1e-8}
    return AdamW(policy.parameters(), lr=settings.lr, weight_decay=settings.weight_decay, **adam)


def policy_update(policy, optimizer, batch, advantages, reference_logp, settings) -> dict[str, list[float]]:
    """One RL step's updates of `policy`, as veRL 0.9.1's actor takes them (`update_actor` of its engine
    workers with `ppo_loss`; tests/test_verl_update.py runs both on one batch): `ppo_mini_batches`
    mini-batches of whole groups in batch order (veRL's `actor.shuffle` is false), each one AdamW step on
    the token-mean dual-clip PPO loss + kl_coef x token-mean low_var_kl to the reference - entropy_coef x
    token-mean entropy, its gradient norm clipped to grad_clip (a step whose norm is not finite is
    skipped, as veRL skips it). Every mini-batch's old log-probabilities are the policy's before the
    step's first update (veRL computes them for the whole batch before updating).

    batch: a `vpo.local.group_forward.StepBatch` of B = G x n rollouts; advantages: (B,) float;
    reference_logp: (B, R) the reference model's log-probabilities of the responses; settings: the
    local_trainer block (`vpo.settings.LocalTrainerSettings`). Returns each statistic per mini-batch:
    pg_loss, kl, entropy, clipfrac, ppo_kl, grad_norm.
    """
    import torch

    n_groups = len(batch.prompts)
    if n_groups % settings.ppo_mini_batches:
        raise ValueError(f"{n_groups} prompts do not split into {settings.ppo_mini_batches} equal mini-batches")
    groups_per_mb = n_groups // settings.ppo_mini_batches
    per_mb = groups_per_mb * batch.n
    mask = batch.mask
    with torch.no_grad():
        # the first mini-batch reads its own log-probabilities below (no update precedes it); the later
        # ones need the policy as it is now, before any update of this step
        if settings.ppo_mini_batches > 1:
            later_logp, _ = batch.logprobs(policy, groups=slice(groups_per_mb, None), temperature=settings.temperature)
    stats = {"pg_loss": [], "kl": [], "entropy": [], "clipfrac": [], "ppo_kl": [], "grad_norm": []}
    for mb in range(settings.ppo_mini_batches):
        rows = slice(mb * per_mb, (mb + 1) * per_mb)
        logp, entropy = batch.logprobs(
            policy,
            groups=slice(mb * groups_per_mb, (mb + 1) * groups_per_mb),
            temperature=settings.temperature,
            with_entropy=True,
        )
        width = logp.shape[1]
        mb_mask = mask[rows, :width]
        old_logp = logp.detach() if mb == 0 else later_logp[rows.start - per_mb : rows.stop - per_mb, :width]
        pg_loss, clipfrac, ppo_kl = ppo_clip_loss(
            logp,
            old_logp,
            advantages[rows],
            mb_mask,
            clip_ratio=settings.clip_ratio,
            clip_ratio_c=settings.clip_ratio_c,
        )
        kl = masked_mean(low_var_kl(logp, reference_logp[rows, :width]), mb_mask)
        mean_entropy = masked_mean(entropy, mb_mask)
        loss = pg_loss + settings.kl_coef * kl
        if settings.entropy_coef:  # at 0 the entropy is only logged, as veRL logs it: no backward through it
            loss = loss - settings.entropy_coef * mean_entropy
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), settings.grad_clip)
        if torch.isfinite(grad_norm):
            optimizer.step()
        for key, value in zip(stats, (pg_loss, kl, mean_entropy, clipfrac, ppo_kl, grad_norm)):
            stats[key].append(float(value.detach()))
    return stats
