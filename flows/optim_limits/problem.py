"""One contract for `solve_flow(optimizer=..., optim_args=...)` in every system: the optimiser's name, its
`optim_args` (names, defaults, validation) and the clocks of the parameter groups, turned into a `Limit` on
the system's loss and its `args`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from .._checks import check_choice, check_options, check_real
from .ode import Limit, adam, adam_rates, gradient_flow, heavy_ball, momentum_friction, sign_descent

__all__ = ["OPTIMIZERS", "limit_problem"]

#: The optimisers whose limits every system's `solve_flow(optimizer=...)` integrates.
OPTIMIZERS = ("gd", "momentum", "sign", "adam")

_LIMITS = {"gd": gradient_flow, "momentum": heavy_ball, "sign": sign_descent, "adam": adam}
_KEYS = {"gd": (), "momentum": ("lr", "beta"), "sign": ("eps",), "adam": ("lr", "b1", "b2", "c1", "c2", "eps")}


def _per_group(value_of_lr, lr, rates):
    """value_of_lr(lr_g) for each learning rate lr_g = lr * rates_g of the pytree `rates` (one value when rates
    is None)."""
    if rates is None:
        return value_of_lr(lr)
    return jax.tree_util.tree_map(lambda r: value_of_lr(lr * r), rates)


def limit_problem(
    loss: Callable,
    optimizer: str,
    optim_args: dict | None,
    batch: Any,
    *,
    lr: float | None = None,
    rates: dict | None = None,
    sign_eps: float = 1e-3,
) -> tuple[Limit, dict]:
    """The limit of `optimizer` on `loss(theta, batch)` and its `args`, from the `optim_args` of a system's
    `solve_flow(optimizer=..., optim_args=...)`.

    **Arguments:**

    - `loss`: the system's loss `loss(theta, batch)`.
    - `optimizer`: `"gd"` (gradient flow), `"momentum"` (heavy ball), `"sign"` (smoothed sign descent) or
      `"adam"` (the Adam ODE); see `flows.optim_limits`.
    - `optim_args` (the same names in every system; `None` is `{}`):
        - `"gd"`: none.
        - `"momentum"`: `"lr"` and `"beta"` (required): `optax.sgd(lr, momentum=beta)`, friction
          (1 - beta)^2 / lr_g per group, clock lr * step / (1 - beta).
        - `"sign"`: `"eps"` (default `sign_eps`): the smoothing of `sign_eps`.
        - `"adam"`: `"lr"`, `"b1"` (0.9), `"b2"` (0.999), `"eps"` (1e-8), optax's defaults, as the systems'
          `train` uses them: c_g = (1 - b) / lr_g; or `"c1"`, `"c2"`, `"eps"`: the lr -> 0 limit at fixed
          c = (1 - b) / lr.
    - `batch`: the data the loss reads (`args["batch"]`).
    - `lr`: the learning rate, where the system's `solve_flow` already fixes it (Scan and Snap's clock is the
      step, lr = 1, its groups' rates are eta_Y and eta_Z); `optim_args` may then not give `"lr"`. `None`:
      `"lr"` comes from `optim_args`.
    - `rates`: the groups' learning rates relative to `lr` (lr_g = lr * rates_g), a dict like theta (each
      group on its own clock, `Limit.make_args(rates=)`); `None`: every parameter at `lr`.
    - `sign_eps`: the system's default smoothing of sign descent (its gradients' scale sets it).

    **Returns:** `(limit, args)` for `flows.solve(limit.vector_field, limit.initial_state(theta0),
    args=args, ...)`.
    """
    optimizer = check_choice("optimizer", optimizer, OPTIMIZERS)
    allowed = [k for k in _KEYS[optimizer] if lr is None or k != "lr"]
    options = check_options("optim_args", optim_args, allowed, f"optimizer {optimizer!r}")
    limit = _LIMITS[optimizer](loss)
    kwargs: dict[str, Any] = {} if rates is None else {"rates": rates}
    if optimizer == "sign":
        kwargs["eps"] = check_real("optim_args['eps']", options.get("eps", sign_eps), low=0.0, strict=True)
    elif optimizer == "momentum":
        missing = [k for k in ("lr", "beta") if k in allowed and k not in options]
        if missing:
            raise ValueError(f"optim_args must give {missing} for optimizer='momentum' (friction (1 - beta)^2 / lr)")
        beta = check_real("optim_args['beta']", options["beta"], low=0.0, high=1.0, high_strict=True)
        lr = options["lr"] if lr is None else lr
        kwargs["friction"] = _per_group(
            lambda lr_g: momentum_friction(lr_g, beta), check_real("optim_args['lr']", lr, low=0.0, strict=True), rates
        )
    elif optimizer == "adam":
        kwargs["eps"] = check_real("optim_args['eps']", options.get("eps", 1e-8), low=0.0, strict=True)
        if "c1" in options or "c2" in options:
            if {"lr", "b1", "b2"} & set(options):
                raise ValueError("optim_args: give either (c1, c2) or (lr, b1, b2), not both")
            if "c1" not in options or "c2" not in options:
                raise ValueError("optim_args: give both c1 and c2 (or neither, for lr, b1, b2)")
            kwargs["c1"], kwargs["c2"] = (
                check_real(f"optim_args['{k}']", options[k], low=0.0, strict=True) for k in ("c1", "c2")
            )
        else:
            if lr is None and "lr" not in options:
                raise ValueError(
                    "optim_args must give lr (with b1, b2: default 0.9, 0.999) or (c1, c2) for optimizer='adam'"
                )
            lr = check_real("optim_args['lr']", options["lr"] if lr is None else lr, low=0.0, strict=True)
            b1, b2 = options.get("b1", 0.9), options.get("b2", 0.999)
            kwargs["c1"], kwargs["c2"] = (
                _per_group(lambda lr_g, i=i: adam_rates(lr_g, b1, b2)[i], lr, rates) for i in (0, 1)
            )
    return limit, limit.make_args(batch, **kwargs)
