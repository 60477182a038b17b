"""vpo/local/adamw.py against torch.optim.AdamW: the same floats, step by step, and state_dicts that load
across the two."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from vpo.local.adamw import AdamW


def two_models():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3, bias=False))
    twin = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3, bias=False))
    twin.load_state_dict(model.state_dict())
    return model, twin


def backward(model, step: int, skip_bias: bool = False):
    generator = torch.Generator().manual_seed(step)
    x, y = torch.randn(4, 5, generator=generator), torch.randn(4, 3, generator=generator)
    ((model(x) - y) ** 2).mean().backward()
    if skip_bias:  # a parameter without a gradient this step (as one unused in a forward)
        model[0].bias.grad = None


@pytest.mark.parametrize("weight_decay", [0.0, 0.01, 0.3])
def test_every_float_equals_torch_adamw_over_steps_with_a_changing_rate_and_a_missing_gradient(weight_decay):
    ours_model, torch_model = two_models()
    ours = AdamW(ours_model.parameters(), lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay)
    theirs = torch.optim.AdamW(
        torch_model.parameters(), lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay
    )
    assert ours.param_groups[0]["params"] == list(ours_model.parameters())  # the tensors, as in torch's group
    for step in range(12):
        lr = 3e-3 * (0.1 + 0.9 * (1 - step / 12))  # a schedule that sets the group's rate, as the warm start does
        ours.param_groups[0]["lr"] = theirs.param_groups[0]["lr"] = lr
        for model, optimizer in ((ours_model, ours), (torch_model, theirs)):
            optimizer.zero_grad()
            backward(model, step, skip_bias=step in (0, 5))
            optimizer.step()
        for a, b in zip(ours_model.parameters(), torch_model.parameters()):
            assert torch.equal(a, b), step
    for index, state in theirs.state_dict()["state"].items():
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(ours.state[index][key], state[key]), (index, key)
    # the bias skipped at step 0 took its first update one step later: its own step count is one less
    assert float(ours.state[1]["step"]) == 10.0 and float(ours.state[0]["step"]) == 12.0


def test_the_update_is_adams_rule_for_a_hand_computed_first_step():
    param = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    optimizer = AdamW([param], lr=0.1, weight_decay=0.5)
    param.grad = torch.tensor([0.5, -4.0])
    optimizer.step()
    # step 1: decay 1 - 0.1 x 0.5; m = 0.1 g, v = 0.001 g^2, bias-corrected m / sqrt(v) = sign(g); lr 0.1
    assert torch.allclose(param.detach(), torch.tensor([0.95 - 0.1, -1.9 + 0.1]), atol=1e-6)


def test_state_dicts_load_across_torch_and_ours_and_continue_with_the_same_floats():
    ours_model, torch_model = two_models()
    theirs = torch.optim.AdamW(torch_model.parameters(), lr=1e-2, weight_decay=0.01)
    for step in range(3):
        theirs.zero_grad()
        backward(torch_model, step)
        theirs.step()
    ours_model.load_state_dict(torch_model.state_dict())
    ours = AdamW(ours_model.parameters(), lr=5.0, weight_decay=0.0)  # the loaded group's settings replace these
    ours.load_state_dict(theirs.state_dict())
    assert ours.param_groups[0]["lr"] == 1e-2 and ours.param_groups[0]["weight_decay"] == 0.01
    for model, optimizer in ((ours_model, ours), (torch_model, theirs)):
        optimizer.zero_grad()
        backward(model, 3)
        optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(ours_model.parameters(), torch_model.parameters()))
    # and the other way: torch's AdamW continues from ours, still decoupled, with the same floats
    back = torch.optim.AdamW(torch_model.parameters(), lr=1.0, weight_decay=0.0)
    back.load_state_dict(copy.deepcopy(ours.state_dict()))  # as a checkpoint holds it (torch keeps no copy)
    assert back.param_groups[0]["lr"] == 1e-2 and back.param_groups[0]["weight_decay"] == 0.01
    for model, optimizer in ((ours_model, ours), (torch_model, back)):
        optimizer.zero_grad()
        backward(model, 4)
        optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(ours_model.parameters(), torch_model.parameters()))
    assert ours.param_groups[0]["params"] == list(ours_model.parameters())  # the tensors, as in torch's group


def test_a_loaded_state_takes_the_parameters_dtype_and_a_plain_step_count():
    param = torch.nn.Parameter(torch.ones(2))
    optimizer = AdamW([param], lr=0.1, weight_decay=0.0)
    moments = torch.tensor([0.5, 0.25], dtype=torch.float64)
    saved = {
        "state": {0: {"step": 3, "exp_avg": moments, "exp_avg_sq": moments}},
        "param_groups": [{"params": [0], "lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}],
    }
    optimizer.load_state_dict(saved)
    state = optimizer.state[0]
    assert state["exp_avg"].dtype == torch.float32 and state["exp_avg_sq"].dtype == torch.float32
    assert state["step"].dtype == torch.float32 and float(state["step"]) == 3.0
    moments[0] = 9.0  # the loaded state is a copy
    assert float(state["exp_avg"][0]) == 0.5


def test_a_state_of_other_parameters_is_refused_naming_the_mismatch():
    ours_model, _ = two_models()
    optimizer = AdamW(ours_model.parameters(), lr=1e-3, weight_decay=0.0)
    other = AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-3, weight_decay=0.0)
    with pytest.raises(ValueError, match="other parameters"):
        optimizer.load_state_dict(other.state_dict())
    saved = AdamW(ours_model.parameters(), lr=1e-3, weight_decay=0.0)
    backward(ours_model, 0)
    saved.step()
    state = saved.state_dict()
    state["state"][0]["exp_avg"] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="exp_avg of parameter 0 has shape"):
        optimizer.load_state_dict(state)
    with pytest.raises(ValueError, match="^AdamW got an empty parameter list$"):
        AdamW([], lr=1e-3, weight_decay=0.0)


def test_importing_and_stepping_it_leaves_torch_dynamo_unimported():
    code = (
        "import sys, torch\n"
        "from vpo.local.adamw import AdamW\n"
        "p = torch.nn.Parameter(torch.ones(2)); o = AdamW([p], lr=0.1, weight_decay=0.0)\n"
        "p.grad = torch.ones(2); o.step(); torch.nn.utils.clip_grad_norm_([p], 1.0)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
