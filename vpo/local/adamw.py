"""AdamW for the local trainer and its warm start, in plain torch.

torch.optim.AdamW on CPU tensors takes its single-tensor path: per parameter, decoupled weight decay,
the two moment updates, the bias corrections in Python floats and one addcdiv. This class runs those
operations in that order on the same state, so every float it writes equals torch's (tests/test_adamw.py
steps both side by side and compares them with torch.equal), and its state_dict has torch's layout, so a
checkpoint written by either loads in the other. Why not torch's: its constructor and step import
torch._dynamo, 1.2 s of every train and base-model job's start-up on one core.

Shapes: each state tensor has its parameter's shape; `step` is a float32 scalar tensor, as in torch.
"""

from __future__ import annotations


class AdamW:
    """AdamW over `params`, one group: lr, betas, eps, weight_decay as torch.optim.AdamW takes them
    (amsgrad, maximize and the foreach/fused paths are not offered)."""

    def __init__(self, params, *, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float):
        params = list(params)
        if not params:
            raise ValueError("AdamW got an empty parameter list")
        self.params = params
        # torch's one group (`lr` is read and set by the warm start's schedule); torch.optim.AdamW fills in
        # its other keys (amsgrad, maximize...) with their defaults when it loads this group
        self.param_groups = [{"params": params, "lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}]
        self.state: dict[int, dict] = {}  # parameter index -> step, exp_avg, exp_avg_sq (made at its first gradient)

    def zero_grad(self) -> None:
        """Drop every parameter's gradient (torch's default, set_to_none)."""
        for param in self.params:
            param.grad = None

    def step(self) -> None:
        """One update of every parameter that has a gradient; the others keep their value and state."""
        import torch

        group = self.param_groups[0]
        lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        with torch.no_grad():
            for index, param in enumerate(self.params):
                grad = param.grad
                if grad is None:
                    continue
                state = self.state.get(index)
                if state is None:
                    state = self.state[index] = {
                        "step": torch.tensor(0.0),
                        "exp_avg": torch.zeros_like(param),
                        "exp_avg_sq": torch.zeros_like(param),
                    }
                state["step"] += 1
                # torch skips this at a decay of 0; a product with exactly 1.0 changes no float either
                param.mul_(1 - lr * decay)
                state["exp_avg"].lerp_(grad, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step = state["step"].item()
                bias_correction1 = 1 - beta1**step
                bias_correction2_sqrt = (1 - beta2**step) ** 0.5
                denom = (state["exp_avg_sq"].sqrt() / bias_correction2_sqrt).add_(eps)
                param.addcdiv_(state["exp_avg"], denom, value=-(lr / bias_correction1))

    def state_dict(self) -> dict:
        """torch.optim's layout: {"state": {index: {...}}, "param_groups": [{..., "params": [0..n-1]}]}."""
        group = dict(self.param_groups[0], params=list(range(len(self.params))))
        return {"state": {i: dict(s) for i, s in self.state.items()}, "param_groups": [group]}

    def load_state_dict(self, saved: dict) -> None:
        """Take a state_dict of this class or of torch.optim.AdamW over the same parameters (moments cast to
        the parameter's dtype, as torch casts them); ValueError when its parameters or shapes do not match."""
        import torch

        groups = saved["param_groups"]
        if len(groups) != 1 or list(groups[0]["params"]) != list(range(len(self.params))):
            raise ValueError(
                f"the saved optimizer state covers other parameters ({sum(len(g['params']) for g in groups)} "
                f"in {len(groups)} groups) than this model's {len(self.params)}: resume from a checkpoint of this run"
            )
        state = {}
        for index, entry in saved["state"].items():
            param = self.params[int(index)]
            for key in ("exp_avg", "exp_avg_sq"):
                if entry[key].shape != param.shape:
                    raise ValueError(
                        f"the saved optimizer state's {key} of parameter {index} has shape "
                        f"{tuple(entry[key].shape)}, the model's {tuple(param.shape)}"
                    )
            state[int(index)] = {
                "step": torch.tensor(float(entry["step"])),
                "exp_avg": entry["exp_avg"].to(param.dtype).clone(),
                "exp_avg_sq": entry["exp_avg_sq"].to(param.dtype).clone(),
            }
        self.state = state
        self.param_groups = [dict(groups[0], params=self.params)]
