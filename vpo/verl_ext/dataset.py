"""The dataset class veRL loads through `data.custom_cls.path=pkg://vpo.verl_ext.dataset`.

veRL 0.9.1's `RLHFDataset.__getitem__` returns the parquet row plus `raw_prompt`, the chat messages
the agent loop templates and generates from. `VPODataset` turns each row into the row its method
trains on with `vpo.prompts.prepare_row` (the function the local trainer and evaluation use):
multi-answer methods ask for m answers and set `extra_info["num_solutions"]`, goal-conditioned
methods show the row's weights, random_weight hides them; the reward then reads the same row.

Settings come from the `data.vpo` block of the composed config (verl/config/vpo_trainer.yaml):
`method`, `m`, `seed`, `alpha`. The overlong-prompt filter measures the stored prompt before the rewrite;
a rewritten prompt that is still too long is left-truncated by veRL's agent loop.
"""

from __future__ import annotations

from verl.utils.dataset.rl_dataset import RLHFDataset

from vpo.methods import get_method
from vpo.prompts import prepare_row


class VPODataset(RLHFDataset):
    """RLHFDataset whose rows (prompt, extra_info, ground truth) are rewritten for the method."""

    def __init__(self, data_files, tokenizer, config, processor=None, max_samples: int = -1):
        block = config.get("vpo", None) or {}
        # Read the method before loading data, so a wrong name fails before anything is read.

        self.vpo_method = get_method(str(block.get("method", "grpo")))  # method whose rows these are
        self.vpo_m = int(block.get("m", 1))  # answers per rollout for multi-answer methods
        self.vpo_seed = int(block.get("seed", 0))  # training seed (goal-conditioned weights per row)
        self.vpo_alpha = block.get("alpha")  # Dirichlet alpha of those weights (null: the method draws none)
        super().__init__(
            data_files=data_files, tokenizer=tokenizer, config=config, processor=processor, max_samples=max_samples
        )

    def __getitem__(self, item):
        row = super().__getitem__(item)
        prepared = prepare_row(row, self.vpo_method, self.vpo_m, self.vpo_seed, alpha=self.vpo_alpha)
        for key in ("prompt", "extra_info", "reward_model"):
            row[key] = prepared[key]
        row["raw_prompt"] = self._build_messages(row, key="prompt")
        return row
