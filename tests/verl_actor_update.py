"""veRL 0.9.1's actor update of one batch on CPU, run as a script by tests/test_verl_update.py.

    python tests/verl_actor_update.py <batch.pt> <result.pt>

Reads the batch the test built (a model directory, prompts, responses, advantages, the reference
log-probabilities, the Hydra overrides), opens veRL's own actor in this process exactly as its engine
workers open it on a one-rank job (`ActorRolloutRefWorker(role="actor")`: the FSDP2 engine, its AdamW,
`ppo_loss`), computes the old log-probabilities with `compute_log_prob` and updates with `update_actor`,
both on the padded batch converted as veRL's trainer converts it (`left_right_2_no_padding`), then writes
the old log-probabilities, the actor's metrics and the updated weights.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def padded_batch(prompts, responses, n: int, pad: int):
    """veRL's padded rollout layout: prompts (B, P) left-padded, input_ids (B, P + R) = left-padded prompt +
    right-padded response,
    attention_mask, position_ids (cumulative count of real tokens - 1, pads at 0), responses (B, R),
    response_mask (B, R)."""
    import torch

    width_p = max(len(p) for p in prompts)
    width_r = max(len(r) for r in responses)
    batch = len(responses)
    input_ids = torch.full((batch, width_p + width_r), pad, dtype=torch.long)
    attention = torch.zeros((batch, width_p + width_r), dtype=torch.long)
    response_ids = torch.full((batch, width_r), pad, dtype=torch.long)
    response_mask = torch.zeros((batch, width_r), dtype=torch.long)
    for row, response in enumerate(responses):
        prompt = prompts[row // n]
        input_ids[row, width_p - len(prompt) : width_p] = torch.tensor(prompt)
        input_ids[row, width_p : width_p + len(response)] = torch.tensor(response)
        attention[row, width_p - len(prompt) : width_p + len(response)] = 1
        response_ids[row, : len(response)] = torch.tensor(response)
        response_mask[row, : len(response)] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return {
        "prompts": input_ids[:, :width_p].clone(),
        "input_ids": input_ids,
        "attention_mask": attention,
        "position_ids": positions,
        "responses": response_ids,
        "response_mask": response_mask,
    }


def main(batch_path: str, result_path: str) -> None:
    import torch

    spec = torch.load(batch_path, weights_only=False)
    with socket.socket() as sock:  # a one-rank gloo group, as a Ray worker of a one-GPU-slot job opens it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(
        {
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "VERL_PLATFORM": "cpu",
            "VERL_ENGINE_DEVICE": "cuda",
        }
    )
    from vpo.verl_ext.cpu import enable

    enable()
    from hydra import compose, initialize_config_dir
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine_workers import ActorRolloutRefWorker
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    with initialize_config_dir(config_dir=str(REPO / "verl" / "config"), version_base=None):
        config = compose(config_name="vpo_trainer", overrides=spec["overrides"])
    worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="actor")
    worker.init_model()

    layout = padded_batch(spec["prompts"], spec["responses"], spec["n"], spec["pad"])
    temperature = float(config.actor_rollout_ref.rollout.temperature)

    def as_tensordict(fields):
        data = TensorDict({key: value.clone() for key, value in fields.items()}, batch_size=len(spec["responses"]))
        data = left_right_2_no_padding(data)
        tu.assign_non_tensor(data, temperature=temperature)
        return data

    # the old log-probabilities, as the trainer's old_log_prob stage asks for them
    data = as_tensordict(layout)
    tu.assign_non_tensor(data, calculate_entropy=True, compute_loss=False)
    output = worker.compute_log_prob(data)
    old_logp = no_padding_2_padding(tu.get(output, "log_probs"), data).float()

    actor = config.actor_rollout_ref.actor
    width_r = layout["responses"].shape[1]
    advantages = spec["advantages"][:, None].expand(-1, width_r) * layout["response_mask"]
    data = as_tensordict(
        {
            **layout,
            "old_log_probs": old_logp,
            "ref_log_prob": spec["reference_logp"][:, :width_r],
            "advantages": advantages.float(),
        }
    )
    mini_batch = int(actor.ppo_mini_batch_size) * int(config.actor_rollout_ref.rollout.n)
    # the keys veRL's trainer sets before `update_actor` (trainer/ppo/v1/trainer_base.py, _update_actor)
    tu.assign_non_tensor(
        data,
        calculate_entropy=bool(actor.entropy_coeff != 0),
        distillation_use_topk=False,
        distillation_only=False,
        global_batch_size=mini_batch,
        mini_batch_size=mini_batch,
        epochs=int(actor.ppo_epochs),
        seed=int(actor.data_loader_seed),
        dataloader_kwargs={"shuffle": bool(actor.shuffle)},
    )
    metrics = tu.get(worker.update_actor(data), "metrics")

    from torch.distributed.tensor import DTensor

    module = worker.actor.engine.module
    state = {
        name: (value.full_tensor() if isinstance(value, DTensor) else value).detach().clone()
        for name, value in module.state_dict().items()
    }
    torch.save({"old_logp": old_logp, "metrics": metrics, "state": state}, result_path)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main(sys.argv[1], sys.argv[2])
