"""Optimiser limits of the mean-field network's training (issue 12, `flows.optim_limits`).

The limits run on the particles {V, W, W1, W2} with the network's objective Q (`network._objective`, the
training set of `config`), from `init_particles(config)`:

- `"gd"`: the particle flow itself, d theta / d tau = -M L dQ/d theta (attention) and -M_mlp L dQ/d w (MLP):
  gradient flow with the per-group clocks M L and M_mlp L; tau = eta_tau * step for GD at learning rates
  eta_tau M L and eta_tau M_mlp L (`network.train`, `gd_optimizer`). Equal to `solve_particles` (tested).
- `"momentum"`: the heavy-ball ODE of `train(optimizer="sgd", lr=eta_tau, momentum=beta)`, same clocks, tau =
  eta_tau * step / (1 - beta), friction (1 - beta)^2 / (eta_tau * scale) per group (scale = M L or M_mlp L).
- `"sign"`, `"adam"`: sign descent and the Adam ODE of `optax.sign_sgd(lr)` / `optax.adam(lr, ...)` on the
  particles with one learning rate lr, clock tau = lr * step: these updates are invariant to the gradient's
  scale, so every particle moves at speed O(1) whatever M and L (no M L factor; eps is compared with the raw
  gradients dQ/d theta, which are O(1 / (M L))).

Adam and sign descent act coordinatewise: the limits are particle ODEs, not Wasserstein gradient flows of Q.
"""

from __future__ import annotations

from .._checks import check_choice, check_real, real_array
from ..solve import Trajectory, solve
from . import observables as obs
from .data import Config, Prompts, held_out_set, training_set
from .network import _check_data, _objective, check_particles, init_particles, with_seed_init

__all__ = ["OPTIMIZERS", "limit_loss", "limit_problem", "solve_optim"]

OPTIMIZERS = ("gd", "momentum", "sign", "adam")


def limit_loss(particles, batch):
    """Q of the particles on the training prompts, as `loss(theta, batch)` (`batch` from
    `observables.make_args`)."""
    return _objective(particles, batch["Z0"], batch["y"], batch["lam"], batch["threshold"], batch["d"], True)


def _params_of(y):
    return y["theta"] if "theta" in y else y


def _on_params(fn):
    def observe(t, y, args):
        return fn(t, _params_of(y), args["batch"])

    return observe


# module-level (one object each): the compiled solve is cached on them
_OBSERVABLES = {"basic": {"Q": _on_params(obs.objective_Q), "R": _on_params(obs.risk_R)},
                "all": _on_params(obs.summary)}


def _scales(config):
    att, mlp = config.M * config.L, config.M_mlp * config.L
    return {"V": float(att), "W": float(att), "W1": float(mlp), "W2": float(mlp)}


def _make_args(config, optimizer, options, batch, limit):
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ValueError(f"optim_args must be a dict, got {type(options).__name__}")
    allowed = {"gd": (), "momentum": ("eta_tau", "beta"), "sign": ("eps",),
               "adam": ("lr", "b1", "b2", "c1", "c2", "eps")}[optimizer]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"optim_args: unknown keys {unknown} for optimizer {optimizer!r} (allowed: "
                         f"{list(allowed)})")
    scales = _scales(config)
    if optimizer == "gd":
        return limit.make_args(batch, rates=scales)
    if optimizer == "momentum":
        missing = [k for k in ("eta_tau", "beta") if k not in options]
        if missing:
            raise ValueError(f"optim_args must give {missing} for optimizer='momentum'")
        eta = check_real("optim_args['eta_tau']", options["eta_tau"], low=0.0, strict=True)
        beta = check_real("optim_args['beta']", options["beta"], low=0.0, high=1.0, high_strict=True)
        friction = {k: (1.0 - beta) ** 2 / (eta * s) for k, s in scales.items()}
        return limit.make_args(batch, friction=friction, rates=scales)
    if optimizer == "sign":
        return limit.make_args(batch, eps=options.get("eps", 1e-6))
    if "c1" in options or "c2" in options:
        if "lr" in options or "b1" in options or "b2" in options:
            raise ValueError("optim_args: give either (c1, c2) or (lr, b1, b2), not both")
        return limit.make_args(batch, c1=options.get("c1"), c2=options.get("c2"), eps=options.get("eps", 1e-8))
    if "lr" not in options:
        raise ValueError("optim_args must give lr (with b1, b2: default 0.9, 0.999) or (c1, c2) for "
                         "optimizer='adam'")
    return limit.make_args(batch, lr=options["lr"], b1=options.get("b1", 0.9), b2=options.get("b2", 0.999),
                           eps=options.get("eps", 1e-8))


def limit_problem(config: Config, optimizer: str, optim_args: dict | None = None, *, particles=None,
                  data: Prompts | None = None, test: Prompts | None = None):
    """(limit, args, particles0) of `solve_optim`: the `flows.optim_limits.Limit` on `limit_loss`, its args
    (`observables.make_args` of the data under "batch", the rates) and the initial particles."""
    from .. import optim_limits as ol

    if not isinstance(config, Config):
        raise ValueError(f"config must be a mean_field.Config, got {type(config).__name__}")
    check_choice("optimizer", optimizer, OPTIMIZERS)
    particles = check_particles(config, init_particles(config) if particles is None else particles)
    data = _check_data(config, training_set(config) if data is None else data)
    test = _check_data(config, held_out_set(config) if test is None else test, "test")
    limit = {"gd": ol.gradient_flow, "momentum": ol.heavy_ball, "sign": ol.sign_descent,
             "adam": ol.adam}[optimizer](limit_loss)
    return limit, _make_args(config, optimizer, optim_args, obs.make_args(config, data, test), limit), particles


def solve_optim(config: Config, ts, optimizer: str, optim_args: dict | None = None, *, particles=None,
                data: Prompts | None = None, test: Prompts | None = None, solver: str = "tsit5",
                rtol: float = 1e-7, atol: float = 1e-9, max_steps: int = 100_000, observables: str = "basic",
                save_states: bool = False, throw: bool = True, seed: int | None = None,
                init: str | None = None) -> Trajectory:
    """The limit of `optimizer` ("gd", "momentum", "sign", "adam"; module docstring) from the initial
    particles of `config` (or `particles`), saved at `ts` (flow time, starting at 0).

    `optim_args`: "momentum" {"eta_tau", "beta"}; "sign" {"eps": 1e-6}; "adam" {"lr", "b1": 0.9, "b2": 0.999,
    "eps": 1e-8} (c = (1 - b) / lr) or {"c1", "c2", "eps"} (b = 1 - c lr, the lr -> 0 limit at fixed c).
    `observables`: "basic" (Q, R) or "all" (`observables.summary`), on the particles. With `save_states`,
    `traj.ys` is the limit's state (the particles, or a dict with them under "theta" and the moments).
    Other arguments as in `solve_particles`.
    """
    config = with_seed_init(config, seed, init)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    check_choice("observables", observables, tuple(_OBSERVABLES))
    ts = real_array("ts", ts)
    if ts.ndim != 1 or ts.size == 0 or ts[0] != 0.0 or (ts.size > 1 and (ts[1:] < ts[:-1]).any()):
        raise ValueError("ts must be a non-decreasing 1-D array of flow times starting at 0")
    if init is not None and particles is not None:
        raise ValueError("init must be None when particles are given (the particles are the initialisation)")
    limit, args, particles = limit_problem(config, optimizer, optim_args, particles=particles, data=data,
                                           test=test)
    return solve(limit.vector_field, limit.initial_state(particles), t1=float(ts[-1]), ts=ts, args=args,
                 solver=solver, rtol=rtol, atol=atol, max_steps=max_steps,
                 observables=_OBSERVABLES[observables], save_states=save_states, throw=throw)
