"""The charted mean-field transformer: every head and neuron given by p = 1 or 2 scalars through a fixed chart.

A chart is a fixed linear map chosen by the user: the attention chart A sends c in R^p to the head
theta = (V, W) = sum_a c_a (A_a^V, A_a^W), the MLP chart B sends c in R^q to the neuron
w = (W1, W2) = sum_b c_b (B_b^1, B_b^2) (q = 0 switches the MLP off: every neuron is zero). The charted model
is the transformer of `flows.mean_field.model` (Gao et al. 2024, eqs. 2.1-2.3) with these heads and neurons,
and a mean-field model in its own right: its law per depth slice lives on R^p (and R^q), its objective is
Q_c(c) = Q(A c, B c), and its Wasserstein gradient flow moves every charted particle with

    d c_{l,j} / d tau = -M L dQ_c / d c_{l,j} = A^T v_{l,j},    v = -M L dQ / d theta  (`gradients.velocity`),

the chart's transpose applied to the full velocity (M_mlp L and B^T for the MLP). With an orthonormal chart
(A^T A = I) the weight decay lam/2 |theta|^2 is lam/2 |c|^2. The existing first variation applies unchanged:
-grad_c delta Q_c/delta rho (c, t_l) = A^T (-grad_theta delta Q/delta rho (A c, t_l)) (`gradients.probe_velocity`
at the expanded probes), which is what the grid solver of `flows.mean_field.grid` evaluates at cell faces.

Charted particles are `{"attention": (L, M, p), "mlp": (L, M_mlp, q)}`; `expand` gives the full particle
dict of the model, `pullback` applies the transpose. `solve_charted` integrates the charted particle flow
(`flows.solve`; at temperature T > 0 the Langevin SDE dc = v dtau + sqrt(2 T) dB by `flows.solve_sde`, the
charted form of `noise.solve_particles_sde`) and `train_charted` is full-batch GD (optax) at learning rates
eta_tau M L and eta_tau M_mlp L (`network.gd_optimizer`'s clocks).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import training
from .._checks import check_int, check_real
from .._solve import Trajectory, solve
from ..sde import solve_sde
from .data import Config, Prompts, training_set
from .gradients import probe_velocity, velocity_autodiff
from .model import ObjectiveInputs, RiskInputs, check_data, objective_value, risk_value
from .observables import make_args, objective_inputs
from .spec import SOLVE_OPTIONS, solve_options, split_options

__all__ = [
    "CHARTED_GROUPS",
    "SDE_OPTIONS",
    "Chart",
    "charted_objective",
    "charted_probe_velocity",
    "charted_risk",
    "charted_velocity",
    "chart_key",
    "check_charted",
    "coordinate_chart",
    "expand",
    "pullback",
    "solve_charted",
    "train_charted",
]

#: The groups of charted particles: the attention heads and the MLP neurons.
CHARTED_GROUPS = ("attention", "mlp")


@dataclasses.dataclass(frozen=True, eq=False)
class Chart:
    """A fixed linear chart of the heads (and neurons).

    **Arguments:**

    - `attention`: (p, 2, D, D), p in {1, 2}: head (V, W) = sum_a c_a (attention[a, 0], attention[a, 1]).
    - `mlp`: (q, 2, D), q in {0, 1, 2}: neuron (W1, W2) = sum_b c_b (mlp[b, 0], mlp[b, 1]); `None` is q = 0
      (the MLP switched off).

    **Raises:** `ValueError` naming the field (shape, p or q out of range, non-finite entries).
    """

    attention: np.ndarray
    mlp: np.ndarray | None = None

    @property
    def _mlp(self) -> np.ndarray:
        assert self.mlp is not None  # set in __post_init__
        return self.mlp

    def __post_init__(self) -> None:
        att = np.asarray(self.attention, dtype=float)
        if att.ndim != 4 or att.shape[1] != 2 or att.shape[2] != att.shape[3] or att.shape[0] not in (1, 2):
            raise ValueError(f"attention must have shape (p, 2, D, D) with p in (1, 2), got {att.shape}")
        D = att.shape[2]
        mlp = np.zeros((0, 2, D)) if self.mlp is None else np.asarray(self.mlp, dtype=float)
        if mlp.ndim != 3 or mlp.shape[1:] != (2, D) or mlp.shape[0] not in (0, 1, 2):
            raise ValueError(f"mlp must have shape (q, 2, {D}) with q in (0, 1, 2), got {mlp.shape}")
        for name, arr in (("attention", att), ("mlp", mlp)):
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"{name} must be finite")
        object.__setattr__(self, "attention", att)
        object.__setattr__(self, "mlp", mlp)

    @property
    def D(self) -> int:
        """The embedding dimension."""
        return int(self.attention.shape[2])

    @property
    def dims(self) -> dict:
        """{"attention": p, "mlp": q}: the dimension of each charted law."""
        return {"attention": int(self.attention.shape[0]), "mlp": int(self._mlp.shape[0])}

    def gram(self, group: str) -> np.ndarray:
        """A^T A (p, p) of a group's chart: the weight decay's quadratic form lam/2 c^T A^T A c."""
        mat = self.matrix(group)
        return mat @ mat.T

    def matrix(self, group: str) -> np.ndarray:
        """The chart of `group` as a (p, 2 D^2) or (q, 2 D) matrix (rows: the images of the unit vectors)."""
        arr = {"attention": self.attention, "mlp": self._mlp}[group]
        return arr.reshape(arr.shape[0], -1)


def coordinate_chart(D: int, attention: Sequence[tuple] = ((0, 0, 0, 0),), mlp: Sequence[tuple] = ()) -> Chart:
    """An orthonormal chart of unit matrices: each charted coordinate sets one entry of V or W (W1 or W2).

    **Arguments:**

    - `attention`: one (which, row, col, sign) per coordinate, `which` 0 for V and 1 for W; e.g.
      `((0, d, d, 1), (1, d, d, 1))` is V = c_0 e_d e_d^T, W = c_1 e_d e_d^T.
    - `mlp`: one (which, index, sign) per MLP coordinate, `which` 0 for W1 and 1 for W2; `()` switches the MLP
      off.
    """
    D = check_int("D", D, 1)
    att = np.zeros((len(attention), 2, D, D))
    for a, (which, row, col, sign) in enumerate(attention):
        att[a, which, row, col] = sign
    neurons = np.zeros((len(mlp), 2, D))
    for b, (which, index, sign) in enumerate(mlp):
        neurons[b, which, index] = sign
    return Chart(att, neurons)


def expand(chart: Chart, cparticles: dict) -> dict:
    """The full particle dict {"V", "W", "W1", "W2"} of charted particles (module docstring)."""
    att = jnp.asarray(chart.attention, cparticles["attention"].dtype)
    mlp = jnp.asarray(chart.mlp, cparticles["mlp"].dtype)
    heads = jnp.einsum("lma,avij->lmvij", cparticles["attention"], att)
    neurons = jnp.einsum("lmb,bvi->lmvi", cparticles["mlp"], mlp)
    return {"V": heads[:, :, 0], "W": heads[:, :, 1], "W1": neurons[:, :, 0], "W2": neurons[:, :, 1]}


def pullback(chart: Chart, full: dict) -> dict:
    """The chart's transpose applied to a full particle dict (a velocity or a gradient): A^T (v_V, v_W) per
    head, B^T (v_W1, v_W2) per neuron."""
    att = jnp.asarray(chart.attention, full["V"].dtype)
    mlp = jnp.asarray(chart.mlp, full["W1"].dtype)
    heads = jnp.stack([full["V"], full["W"]], axis=2)
    neurons = jnp.stack([full["W1"], full["W2"]], axis=2)
    return {"attention": jnp.einsum("lmvij,avij->lma", heads, att), "mlp": jnp.einsum("lmvi,bvi->lmb", neurons, mlp)}


def check_charted(config: Config, chart: Chart, cparticles: dict) -> dict:
    """Validate charted particles against `config` and `chart`: {"attention": (L, M, p), "mlp": (L, M_mlp, q)}
    of finite floats; returns them as arrays."""
    if not isinstance(chart, Chart):
        raise ValueError(f"chart must be a flows.mean_field.chart.Chart, got {type(chart).__name__}")
    if chart.D != config.D:
        raise ValueError(f"chart has D = {chart.D}, config has D = {config.D}")
    if not isinstance(cparticles, dict) or set(cparticles) != set(CHARTED_GROUPS):
        raise ValueError(f"cparticles must be a dict with keys {CHARTED_GROUPS}")
    want = {
        "attention": (config.L, config.M, chart.dims["attention"]),
        "mlp": (config.L, config.M_mlp, chart.dims["mlp"]),
    }
    out = {}
    for name, shape in want.items():
        arr = jnp.asarray(cparticles[name])
        if arr.shape != shape:
            raise ValueError(f"cparticles[{name!r}] must have shape {shape}, got {arr.shape}")
        if not jnp.issubdtype(arr.dtype, jnp.floating) or not bool(jnp.all(jnp.isfinite(arr))):
            raise ValueError(f"cparticles[{name!r}] must be finite floating point")
        out[name] = arr
    return out


def charted_objective(
    chart: Chart, cparticles: dict, *inputs: *ObjectiveInputs, weights: dict | None = None
) -> jax.Array:
    """Q_c(c) = Q(expand(c)) (eq. 2.3 of the charted heads): `model.objective_value` of the expanded particles;
    `inputs` = (Z0, y, lam, threshold, d) and `weights` as documented there."""
    return objective_value(expand(chart, cparticles), *inputs, rev=False, weights=weights)


def charted_risk(chart: Chart, cparticles: dict, *inputs: *RiskInputs, weights: dict | None = None) -> jax.Array:
    """R of the charted particles: `model.risk_value` of the expanded particles; `inputs` = (Z0, y, threshold,
    d) and `weights` as documented there."""
    return risk_value(expand(chart, cparticles), *inputs, rev=False, weights=weights)


def charted_velocity(chart: Chart, cparticles: dict, *inputs: *ObjectiveInputs, rev: bool = True) -> dict:
    """A^T v: the charted particle velocity, the chart's transpose of `gradients.velocity_autodiff` at the
    expanded particles (= -M L dQ_c/dc, tests); `inputs` = (Z0, y, lam, threshold, d) and `rev` as there."""
    return pullback(chart, velocity_autodiff(expand(chart, cparticles), *inputs, rev=rev))


def charted_probe_velocity(
    chart: Chart, atoms: dict, probes: dict, *inputs: *ObjectiveInputs, weights: dict | None = None
) -> dict:
    """-grad_c delta Q_c/delta rho at charted probes {"attention": (L, P, p), "mlp": (L, Pm, q)} for the law of
    the charted `atoms` with relative `weights`: the chart's transpose of `gradients.probe_velocity`, whose
    `inputs` = (Z0, y, lam, threshold, d) these are."""
    full = probe_velocity(expand(chart, atoms), *inputs, probes=expand(chart, probes), weights=weights)
    return pullback(chart, full)


def _complete(c: dict, args: dict) -> dict:
    """The charted particles with an empty group (q = 0: `flows.solve` takes no zero-size leaves) restored
    from its shape, carried in `args["empty"]`."""
    return {**{g: jnp.zeros(args["empty"][g].shape) for g in args["empty"]}, **c}


def _observables(chart: Chart):
    def observe(t, c, args):
        full = expand(chart, _complete(c, args))
        Q = objective_value(full, *objective_inputs(args))
        R = risk_value(full, args["Z0"], args["y"], args["threshold"], args["d"])
        return {"Q": Q, "R": R}

    return observe


def _field(chart: Chart, rev: bool):
    def field(t, c, args):
        v = charted_velocity(chart, _complete(c, args), *objective_inputs(args), rev=rev)
        return {g: v[g] for g in c}

    return field


_FIELDS: dict = {}


def chart_key(chart: Chart) -> tuple:
    """A hashable key of the chart's content (equal charts share compiled programs)."""
    return (chart.attention.shape, chart.attention.tobytes(), chart._mlp.shape, chart._mlp.tobytes())


def _cached_field(chart: Chart, rev: bool):
    """One vector field per chart content (flows.solve caches its compiled program per field)."""
    key = (chart_key(chart), rev)
    if key not in _FIELDS:
        _FIELDS[key] = (_field(chart, rev), _observables(chart))
    return _FIELDS[key]


#: the `flows.solve_sde` keywords that `solve_charted` passes on at temperature > 0.
SDE_OPTIONS = ("dt", "solver", "max_steps", "save_states", "throw")


def solve_charted(
    config: Config,
    chart: Chart,
    ts: ArrayLike,
    cparticles: dict,
    *,
    data: Prompts | None = None,
    temperature: float = 0.0,
    seed: int = 0,
    **options: Any,
) -> Trajectory:
    """Integrate the charted particle flow from `cparticles`, saving Q and R (and the states) at `ts`.

    **Arguments:**

    - `ts`: save times in flow time tau, starting at 0.
    - `data`: the training prompts (default `training_set(config)`).
    - `temperature`: T >= 0; T > 0 integrates the Langevin SDE dc = v dtau + sqrt(2 T) dB (`flows.solve_sde`
      with constant step `dt`, Brownian motion seeded by `seed`).
    - `options`: at T = 0 the keywords of `flows.solve`, which defines them (`spec.SOLVE_OPTIONS`: `solver`,
      default "auto", `rtol`, `atol`, `max_steps`, ...), and `dt` for constant steps instead of adaptive ones
      (`spec.solve_options`); at T > 0 those of `flows.solve_sde` named in `SDE_OPTIONS` (`dt`, required, the
      SDE step; `solver`, default "euler"; ...). `save_states` (default here `False`) also keeps the charted
      particles at `ts`. Another keyword is a ValueError naming it.
    """
    cparticles = check_charted(config, chart, cparticles)
    data = check_data(config, training_set(config) if data is None else data)
    temperature = check_real("temperature", temperature, low=0.0)
    ts = np.asarray(ts, float)
    args = make_args(config, data)
    args["empty"] = {g: np.zeros(c.shape) for g, c in cparticles.items() if c.size == 0}
    cparticles = {g: c for g, c in cparticles.items() if c.size}
    options = {"save_states": False, **options}
    solver = options.pop("solver", None)  # None: the default of the solve below
    if temperature > 0.0:
        (options,) = split_options("solve_charted at temperature > 0", options, SDE_OPTIONS)
        if options.get("dt") is None:
            raise ValueError("dt (the SDE step) must be given when temperature > 0")
        options["dt"] = check_real("dt", options["dt"], low=0.0, strict=True)
        field, observe = _cached_field(chart, True)
        return solve_sde(
            field,
            cparticles,
            sigma=math.sqrt(2.0 * temperature),
            t1=float(ts[-1]),
            ts=ts,
            args=args,
            solver=solver or "euler",
            seed=seed,
            observables=observe,
            **options,
        )
    (options,) = split_options("solve_charted", options, ("dt", *SOLVE_OPTIONS))
    solver = solver or "auto"  # with the reverse-mode field (no forward derivatives) "auto" is Tsit5
    field, observe = _cached_field(chart, solver != "kvaerno5")
    options = solve_options("solve_charted", options.pop("dt", None), {"solver": solver, **options})
    return solve(field, cparticles, t1=float(ts[-1]), ts=ts, args=args, observables=observe, **options)


def train_charted(
    config: Config, chart: Chart, cparticles: dict, eta_tau: float, steps: int, *, data: Prompts | None = None
) -> tuple[dict, np.ndarray]:
    """Full-batch GD on Q_c with optax (`flows.training.make_optimizer`) at learning rates eta_tau M L
    (attention) and eta_tau M_mlp L (MLP): explicit Euler of the charted flow with step eta_tau.

    **Returns:** (final charted particles, Q before every step and after the last (steps + 1,)).
    """
    cparticles = check_charted(config, chart, cparticles)
    data = check_data(config, training_set(config) if data is None else data)
    eta_tau = check_real("eta_tau", eta_tau, low=0.0, strict=True)
    steps = check_int("steps", steps, 1)
    labels = {g: g for g in CHARTED_GROUPS}
    scale = {"attention": float(config.M * config.L), "mlp": float((config.M_mlp or 0) * config.L)}
    opt = training.make_optimizer("gd", eta_tau, labels=labels, scale=scale)
    args = make_args(config, data)
    dtype = data.Z0.dtype
    state0 = jax.tree_util.tree_map(
        lambda x: jnp.asarray(x, dtype) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x, opt.init(cparticles)
    )

    def loss(c):
        return charted_objective(chart, c, *objective_inputs(args))

    @jax.jit
    def run(c, state):
        def step(carry, _):
            c, state = carry
            value, grad = jax.value_and_grad(loss)(c)
            updates, state = opt.update(grad, state, c)
            return (jax.tree_util.tree_map(jnp.add, c, updates), state), value

        (c, state), values = jax.lax.scan(step, (c, state), None, length=steps)
        return c, jnp.concatenate([values, loss(c)[None]])

    final, values = run(cparticles, state0)
    return final, np.asarray(values)
