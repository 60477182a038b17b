"""`vpo merge` on a real FSDP checkpoint: two CPU ranks (gloo) shard a tiny Qwen2 model with FSDP2,
veRL's own FSDPCheckpointManager writes `global_step_N/actor`, and the merged `model/` loads with
transformers and equals the original weights at bf16. Also the local-backend copy and the errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.slow  # real veRL imports (about 12 s per process)
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# Runs as its own program: two processes, gloo, FSDP2 fully_shard on CPU, veRL's checkpoint manager.
WRITER = textwrap.dedent("""
    import os, sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    def build_model():
        from transformers import Qwen2Config, Qwen2ForCausalLM
        torch.manual_seed(1234)
        config = Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                             tie_word_embeddings=False)
        return Qwen2ForCausalLM(config)

    def rank_main(rank, world, run_dir, reference_dir, port):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                          LOCAL_RANK=str(rank))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        from omegaconf import OmegaConf
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

        model = build_model()
        if rank == 0:
            model.save_pretrained(reference_dir)  # the weights before sharding
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        contents = OmegaConf.create({"save_contents": ["model", "optimizer", "extra"],
                                     "load_contents": ["model", "optimizer", "extra"]})
        manager = FSDPCheckpointManager(model=model, optimizer=optimizer, lr_scheduler=None,
                                        processing_class=None, checkpoint_config=contents)
        for step in (1, 2):
            manager.save_checkpoint(os.path.join(run_dir, "checkpoints", f"global_step_{step}", "actor"),
                                    global_step=step)
        if rank == 0:
            with open(os.path.join(run_dir, "checkpoints", "latest_checkpointed_iteration.txt"), "w") as fh:
                fh.write("2")
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        run_dir, reference_dir, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
        mp.spawn(rank_main, args=(2, run_dir, reference_dir, port), nprocs=2, join=True)
""")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("fsdp")
    run_dir, reference = root / "run", root / "reference"
    script = root / "write_fsdp_checkpoint.py"
    script.write_text(WRITER)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, str(script), str(run_dir), str(reference), str(_free_port())],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir / "train.json").write_text(json.dumps({"backend": "verl", "task": "maze", "method": "vpo", "seed": 0}))
    return run_dir, reference


def test_checkpoint_is_sharded_the_way_verl_writes_it(fsdp_run):
    actor = fsdp_run[0] / "checkpoints" / "global_step_2" / "actor"
    assert json.loads((actor / "fsdp_config.json").read_text()) == {"FSDP_version": 2, "world_size": 2}
    assert {p.name for p in actor.glob("model_world_size_2_rank_*.pt")} == {
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
    }
    assert (actor / "huggingface" / "config.json").is_file()


def test_vpo_merge_gives_the_original_weights(fsdp_run):
    from transformers import AutoModelForCausalLM

    from vpo.merge import latest_actor_dir

    run_dir, reference = fsdp_run
    assert latest_actor_dir(run_dir / "checkpoints").parent.name == "global_step_2"
    result = subprocess.run(
        [sys.executable, "-m", "vpo.cli", "merge", "--run", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not list(run_dir.glob(".model.tmp-*"))
    merged = AutoModelForCausalLM.from_pretrained(run_dir / "model", dtype=torch.float32)
    original = AutoModelForCausalLM.from_pretrained(reference, dtype=torch.float32)
    merged_state, original_state = merged.state_dict(), original.state_dict()
    assert set(merged_state) == set(original_state) and len(merged_state) >= 20
    for name, value in original_state.items():
        assert torch.equal(merged_state[name], value.to(torch.bfloat16).to(torch.float32)), name


def test_local_backend_copies_the_final_model(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from vpo.merge import merge_run

    run_dir = tmp_path / "run"
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=32,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    )
    model.save_pretrained(run_dir / "checkpoints" / "final")
    (run_dir / "train.json").write_text(json.dumps({"backend": "local"}))
    (run_dir / "model").mkdir()
    (run_dir / "model" / "stale.txt").write_text("an older merge")
    out = merge_run(run_dir)
    loaded = Qwen2ForCausalLM.from_pretrained(out)
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    assert not (out / "stale.txt").exists()


def test_merge_errors_name_the_problem(tmp_path):
    from vpo.merge import MergeError, merge_run

    with pytest.raises(MergeError, match="train.json"):
        merge_run(tmp_path)
    (tmp_path / "train.json").write_text(json.dumps({"backend": "verl"}))
    with pytest.raises(MergeError, match="global_step_N/actor"):
        merge_run(tmp_path)
