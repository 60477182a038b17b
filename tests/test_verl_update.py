"""The local trainer's update is veRL's: one batch, one tiny model, two trainers.

A batch of 8 prompts x 8 rollouts (random prompts, responses of 1 to 30 tokens, advantages, a reference
model's log-probabilities) and a model directory as `vpo base-model` writes it go to veRL 0.9.1's own
actor on CPU (tests/verl_actor_update.py: its engine worker, FSDP2, AdamW and `ppo_loss`, composed from
the `verl_cpu` preset's command) and to the local trainer's `policy_update` on `TinyLlama` loaded from the
same directory. The two must agree on the old log-probabilities, each mini-batch's policy loss, KL and
gradient norm, and every parameter's change.

Settings: the cpu preset's local_trainer block. The verl_cpu preset's own command already has the same
clip ratios, dual clip, KL loss and form, entropy coefficient, token-mean aggregation, gradient clip and
weight decay (checked below); the test sets on the veRL side what differs by design: the local trainer's
learning rate and mini-batch count (the verl_cpu preset takes 1 mini-batch of 4 prompts), and float32
compute (veRL's FSDP engine computes in bfloat16 by default, the local trainer in float32).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # a veRL process: about 30 s

REPO = Path(__file__).resolve().parents[1]
PROMPTS, ROLLOUTS = 8, 8
RTOL = 1e-5


def _cpu_settings(**changes):
    from vpo.config import load_config
    from vpo.settings import LocalTrainerSettings

    cfg = load_config(str(REPO / "config.yaml"), preset="cpu")
    return dataclasses.replace(LocalTrainerSettings.from_dict(cfg["local_trainer"]), **changes)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_maze_data):
    """A base model directory as `vpo base-model` writes it, at the cpu preset's sizes (2 layers, 2 heads
    of 32), 30 warm-start steps so its distribution is not uniform."""
    from vpo.local.base import build_base_model

    out = tmp_path_factory.mktemp("update") / "base"
    build_base_model(
        "maze",
        str(tiny_maze_data),
        str(out),
        _cpu_settings(warm_start_steps=30, warm_start_batch=4),
        mode="single",
        m=3,
        seed=0,
    )
    return out


def _batch(vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)

    def tokens(low, high):
        return torch.randint(4, vocab, (int(torch.randint(low, high, (1,), generator=g)),), generator=g).tolist()

    prompts = [tokens(5, 21) for _ in range(PROMPTS)]
    responses = [tokens(1, 31) for _ in range(PROMPTS * ROLLOUTS)]
    scores = torch.rand(PROMPTS, ROLLOUTS, generator=g)
    advantages = ((scores - scores.mean(1, keepdim=True)) / (scores.std(1, keepdim=True) + 1e-6)).flatten()
    return prompts, responses, advantages


def _verl_overrides(settings, command_overrides):
    lr_and_batches = [
        f"actor_rollout_ref.actor.optim.lr={settings.lr}",
        f"data.train_batch_size={PROMPTS}",
        f"actor_rollout_ref.rollout.n={ROLLOUTS}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS // settings.ppo_mini_batches}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",  # 4 micro-batches per mini-batch
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "++actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
    ]
    return list(command_overrides) + lr_and_batches


def _verl_cpu_command(tmp_path, model_dir):
    from vpo.config import load_config
    from vpo.verl_ext.command import build_command

    cfg = load_config(str(REPO / "config.yaml"), preset="verl_cpu")
    return build_command(cfg, "maze", "grpo", 0, tmp_path / "cell", tmp_path / "data", model=str(model_dir))


def test_the_verl_cpu_preset_has_the_local_trainers_loss_settings(tmp_path, model_dir):
    from hydra import compose, initialize_config_dir

    settings = _cpu_settings()
    with initialize_config_dir(config_dir=str(REPO / "verl" / "config"), version_base=None):
        config = compose(config_name="vpo_trainer", overrides=_verl_cpu_command(tmp_path, model_dir).overrides)
    actor = config.actor_rollout_ref.actor
    assert (actor.clip_ratio, actor.clip_ratio_low, actor.clip_ratio_high) == (settings.clip_ratio,) * 3
    assert actor.clip_ratio_c == settings.clip_ratio_c
    assert (actor.use_kl_loss, actor.kl_loss_type, actor.kl_loss_coef) == (True, "low_var_kl", settings.kl_coef)
    assert actor.entropy_coeff == settings.entropy_coef and actor.loss_agg_mode == "token-mean"
    assert actor.policy_loss.loss_mode == "vanilla" and actor.ppo_epochs == 1 and actor.shuffle is False
    assert (actor.optim.clip_grad, actor.optim.weight_decay) == (settings.grad_clip, settings.weight_decay)
    assert actor.optim.lr_scheduler_type == "constant" and actor.optim.lr_warmup_steps_ratio == 0
    assert config.actor_rollout_ref.rollout.temperature == settings.temperature


def _run_both(tmp_path, model_dir, settings):
    """(veRL's result, the local trainer's) on the same batch and weights."""
    from vpo.local.group_forward import StepBatch
    from vpo.local.rl import optimizer_for, policy_update
    from vpo.tiny_llama import TinyLlama

    policy = TinyLlama.from_dir(model_dir)
    prompts, responses, advantages = _batch(policy.config.vocab_size)
    pad = policy.config.pad_token_id
    batch = StepBatch(prompts, responses, ROLLOUTS, pad)
    reference = TinyLlama(policy.config_dict)  # another model's log-probabilities as the reference's
    torch.manual_seed(1)
    for parameter in reference.parameters():
        torch.nn.init.normal_(parameter, std=0.05)
    with torch.no_grad():
        reference_logp, _ = batch.logprobs(reference, temperature=settings.temperature)

    spec = {
        "prompts": prompts,
        "responses": responses,
        "n": ROLLOUTS,
        "pad": pad,
        "advantages": advantages,
        "reference_logp": reference_logp,
        "overrides": _verl_overrides(settings, _verl_cpu_command(tmp_path, model_dir).overrides),
    }
    torch.save(spec, tmp_path / "batch.pt")
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "vpo.verl_ext.plugin", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "verl_actor_update.py"),
            str(tmp_path / "batch.pt"),
            str(tmp_path / "result.pt"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    verl = torch.load(tmp_path / "result.pt", weights_only=False)

    before = {name: value.detach().clone() for name, value in policy.state_dict().items()}
    with torch.no_grad():
        old_logp, _ = batch.logprobs(policy, temperature=settings.temperature)
    stats = policy_update(policy, optimizer_for(policy, settings), batch, advantages, reference_logp, settings)
    after = policy.state_dict()
    changes = {name: (after[name] - before[name], verl["state"][name] - before[name], after[name]) for name in before}
    return verl, {"old_logp": old_logp, "stats": stats, "changes": changes, "mask": batch.mask}


def test_one_step_equals_verls_actor_update(tmp_path, model_dir):
    """Two mini-batches of 4 prompts x 8 rollouts (veRL: 4 micro-batches of 8 each, its loss normalised by
    the mini-batch's token count). The first update moves the second mini-batch's ratios enough that the
    clip and the dual clip bind on some tokens (veRL's pg_clipfrac and pg_clipfrac_lower, checked)."""
    settings = _cpu_settings()
    verl, local = _run_both(tmp_path, model_dir, settings)
    mask = local["mask"].bool()
    width = verl["old_logp"].shape[1]
    assert torch.allclose(local["old_logp"][:, :width][mask], verl["old_logp"][mask], rtol=RTOL, atol=1e-6)

    metrics, stats = verl["metrics"], local["stats"]
    assert len(stats["grad_norm"]) == settings.ppo_mini_batches == len(metrics["grad_norm"])
    assert metrics["actor/pg_clipfrac"][1] > 0 and metrics["actor/pg_clipfrac_lower"][1] > 0
    assert stats["pg_loss"] == pytest.approx([float(v) for v in metrics["actor/pg_loss"]], rel=RTOL)
    assert stats["kl"] == pytest.approx([float(v) for v in metrics["kl_loss"]], rel=RTOL)
    assert stats["grad_norm"] == pytest.approx(metrics["grad_norm"], rel=RTOL)
    for name, (local_change, verl_change, parameter) in local["changes"].items():
        assert verl_change.norm() > 0, name
        # AdamW divides each element's first moment by the root of its second: in an element whose two
        # gradients nearly cancel, float32 rounding (veRL sums 4 micro-batches, the local trainer three
        # length buckets) moves its change by up to 0.3%; per tensor the changes agree to 1.3e-4 (measured;
        # 2.3e-5 with the responses in one padded batch, whose log-probabilities differ from the buckets'
        # by 5e-7 at most).
        assert float((local_change - verl_change).norm() / verl_change.norm()) < 3e-4, name
