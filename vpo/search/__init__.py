"""The evolutionary search (paper section 4): `vpo evolve select` picks each task's hardest test problems
(`hardest`), `vpo evolve search` runs one cell's OpenEvolve search over them (`evolve`, one problem at a
time in `problem`), OpenEvolve's workers score programs through `evaluator` (loaded by path: its folder
goes on their sys.path, so no module here shares a standard library name), and the cell's model answers
on 127.0.0.1 (`llm_server` on a CPU, `vllm_server` on a GPU)."""
