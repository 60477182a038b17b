"""The v1 trainer `vpo_sync` (`trainer.v1.trainer_mode=vpo_sync`): veRL 0.9.1's sync trainer plus
one step. Before veRL computes advantages it fetches every rollout's `reward_extra_info` (the reward
function's `sub_scores` JSON text, scalar and channels) from TransferQueue and stages it, row-aligned,
for the estimators of vpo.verl_ext.estimators; afterwards it reads the advantages veRL wrote back and
logs the step's rollout metrics, built as every backend builds them (vpo.backend.rollout_record).

Importing this module imports veRL; `register_trainer` (called by vpo.verl_ext.plugin) adds the
class to veRL's trainer registry.
"""

from __future__ import annotations

from omegaconf import open_dict
from verl.trainer.ppo.v1 import PPOTrainerSync
from verl.trainer.ppo.v1 import register_trainer as verl_register_trainer
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

from vpo.task import resolve
from vpo.verl_ext import TRAINER_MODE
from vpo.verl_ext.estimators import (
    judge_strategies,
    method_settings_from_config,
    response_rows,
    rollout_metrics,
    stage_from_extra_info,
    staged,
)


class VPOTrainerSync(PPOTrainerSync):
    """veRL's sync v1 trainer that stages each rollout's reward_extra_info for the estimators."""

    def __init__(self, config):
        # veRL branches on trainer_mode == "sync" (replay buffer, TQ checkpoints, batch sizes);
        # the class is already chosen, so behave exactly as the sync trainer from here on.
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"
        self.config = config
        self._objectives()  # a missing task stops the run here, before the first rollout
        super().__init__(config)

    def _compute_advantage(self, batch, metrics: dict):
        import transfer_queue as tq

        fields = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "extra_fields"]
        )
        uids = [str(uid) for uid in fields["uid"]]
        infos = [ef.get("reward_extra_info") if isinstance(ef, dict) else None for ef in fields["extra_fields"]]
        rollouts = stage_from_extra_info(infos, step=getattr(self, "global_steps", 0))
        judged = self._judged(batch, rollouts, uids)
        with staged(rollouts):
            batch = super()._compute_advantage(batch, metrics)
        rows = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["advantages", "response_mask", "responses"]
        )
        advantages, lengths, ended = response_rows(
            *(
                [row.cpu().numpy() for row in rows[name].unbind()]
                for name in ("advantages", "response_mask", "responses")
            ),
            eos_token_id=self.tokenizer.eos_token_id,
            max_length=int(self.config.data.max_response_length),
        )
        metrics.update(
            rollout_metrics(
                rollouts,
                uids,
                objectives=self._objectives(),
                advantages=advantages,
                lengths=lengths,
                ended=ended,
                judged=judged,
            )
        )
        return batch

    def _objectives(self) -> list[str]:
        """The objectives of the task the run trains (`algorithm.vpo.task`), which name its reward metrics."""
        task = self.config.algorithm.vpo.get("task")
        if not task:
            raise ValueError(
                "algorithm.vpo.task is not set: the vpo_sync trainer names the step's reward/<objective> metrics "
                "after the task's objectives; pass algorithm.vpo.task=<task> (`vpo train --backend verl` does)"
            )
        return list(resolve(str(task)).objective_names)

    def _judged(self, batch, rollouts, uids: list[str]) -> dict:
        """A keyed method's served judge relabels the staged strategies (no judge: nothing happens)."""
        import transfer_queue as tq

        settings, _ = method_settings_from_config(self.config.algorithm)
        if not settings.get("judge"):
            return {}
        text = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["prompts", "responses"])
        pad = self.tokenizer.pad_token_id
        questions, responses = (
            [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in text[name].to_padded_tensor(padding=pad)]
            for name in ("prompts", "responses")
        )
        return judge_strategies(rollouts, uids, questions, responses, self.config.algorithm)


def register_trainer() -> None:
    """Register `vpo_sync` with veRL (idempotent)."""
    if TRAINER_REGISTRY.get(TRAINER_MODE) is not VPOTrainerSync:
        verl_register_trainer(TRAINER_MODE)(VPOTrainerSync)
