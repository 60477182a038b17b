"""The embedded CPU backend: tiny model and tokenizer (`model`), warm start (`base`, the
`vpo base-model` command), the RL loop (`trainer`, run by `vpo train --backend local`), its
losses (`rl`), checkpoints (`checkpoint`) and settings (`settings`, config block `local_trainer`)."""
