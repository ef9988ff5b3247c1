"""Observables of the mean-field transformer, shared by the GD record and the particle-flow trajectory.

`OBSERVABLES` are functions `f(t, particles, args)` (the `flows.solve` observable signature) of
`args = make_args(...)`: Q and R (eq. 2.3), the dissipation of the energy identity dQ/dtau = -dissipation,
particle speeds, train and test RMSE. On particle clouds: `w2_per_slice` (exact with POT or debiased Sinkhorn
with ott-jax, bias bounded by `sinkhorn_bias_bound`), `coupled_rms` and `first_variation` (the data part of
delta Q / delta rho at probe particles). See docs/systems/mean_field.md.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from scipy.spatial.distance import cdist

from .._checks import check_choice, check_int, check_real
from .._optional import require
from .._xla import jit as xla_jit
from .data import Config, Particles, Prompts
from .gradients import adjoint_states, velocity_autodiff
from .model import (
    GROUPS,
    attention_update,
    check_data,
    check_particles,
    group_weighted,
    layer_scales,
    mlp_update,
    objective_value,
    predict,
    risk_value,
)

__all__ = [
    "OBSERVABLES",
    "clouds",
    "coupled_rms",
    "dissipation",
    "first_variation",
    "make_args",
    "objective_inputs",
    "max_speed",
    "mean_speed",
    "objective_Q",
    "particle_speeds",
    "risk_R",
    "sinkhorn_bias_bound",
    "summary",
    "test_rmse",
    "train_rmse",
    "w2_per_slice",
]


def make_args(config: Config, data: Prompts, test: Prompts | None = None, dtype: Any = None) -> dict:
    """The args dict of the particle vector field and of the observables (arrays only, so that new values
    of lam or the threshold do not recompile): Z0, y, Z0_test, y_test, lam, threshold, d."""
    data = check_data(config, data)
    test = data if test is None else check_data(config, test, "test")
    dtype = jnp.dtype(dtype or jnp.result_type(data.Z0))
    return {
        "Z0": data.Z0,
        "y": data.y,
        "Z0_test": test.Z0,
        "y_test": test.y,
        "lam": jnp.asarray(config.lam, dtype),
        "threshold": jnp.asarray(config.threshold, dtype),
        "d": jnp.asarray(config.d, jnp.int32),
    }


def objective_inputs(args: dict) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """(Z0, y, lam, threshold, d) of a `make_args` dict: the arguments after the particles of the array-level
    `model.objective_value`, `gradients.velocity_autodiff` and `gradients.probe_velocity`."""
    return args["Z0"], args["y"], args["lam"], args["threshold"], args["d"]


def _v(particles, args):
    return velocity_autodiff(particles, *objective_inputs(args))


def objective_Q(t: float, particles: Particles, args: dict) -> jax.Array:
    """Q (eq. 2.3)."""
    return objective_value(particles, *objective_inputs(args))


def risk_R(t: float, particles: Particles, args: dict) -> jax.Array:
    """R = mean (yhat - y)^2 / 2 on the training prompts."""
    return risk_value(particles, args["Z0"], args["y"], args["threshold"], args["d"])


def dissipation(t: float, particles: Particles, args: dict) -> jax.Array:
    """(1/(M L)) sum |v_att|^2 + (1/(M_mlp L)) sum |v_mlp|^2 = -dQ/dtau along the flow (P4)."""
    return group_weighted(_v(particles, args), layer_scales(particles))


def particle_speeds(v: Particles) -> jax.Array:
    """|v| of every attention particle (V, W) then every MLP particle (W1, W2), flattened, for a velocity dict
    with a leading depth axis (layers or nodes)."""
    att = jnp.sqrt(jnp.sum(v["V"] ** 2, axis=(2, 3)) + jnp.sum(v["W"] ** 2, axis=(2, 3))).ravel()
    mlp = jnp.sqrt(jnp.sum(v["W1"] ** 2, axis=2) + jnp.sum(v["W2"] ** 2, axis=2)).ravel()
    return jnp.concatenate([att, mlp])


def max_speed(t: float, particles: Particles, args: dict) -> jax.Array:
    """max over attention particles (V, W) and MLP particles (W1, W2) of |v|."""
    return jnp.max(particle_speeds(_v(particles, args)))


def mean_speed(t: float, particles: Particles, args: dict) -> jax.Array:
    """mean over all particles of |v|."""
    return jnp.mean(particle_speeds(_v(particles, args)))


def train_rmse(t: float, particles: Particles, args: dict) -> jax.Array:
    """sqrt(mean (yhat - y)^2) on the training prompts."""
    err = predict(particles, args["Z0"], args["threshold"], args["d"]) - args["y"]
    return jnp.sqrt(jnp.mean(err * err))


def test_rmse(t: float, particles: Particles, args: dict) -> jax.Array:
    """sqrt(mean (yhat - y)^2) on fresh prompts."""
    err = predict(particles, args["Z0_test"], args["threshold"], args["d"]) - args["y_test"]
    return jnp.sqrt(jnp.mean(err * err))


#: The observables recorded by `network.train` and saved by `solve_flow`, by name.
OBSERVABLES = {
    "Q": objective_Q,
    "R": risk_R,
    "dissipation": dissipation,
    "max_speed": max_speed,
    "mean_speed": mean_speed,
    "train_rmse": train_rmse,
    "test_rmse": test_rmse,
}


def summary(t: float, particles: Particles, args: dict) -> dict:
    """Every entry of `OBSERVABLES` from one velocity evaluation (what `network.train` records and
    `solve_flow(observables="all")` saves; the names and values are those of `OBSERVABLES`)."""
    v = _v(particles, args)
    speeds = particle_speeds(v)
    return {
        "Q": objective_Q(t, particles, args),
        "R": risk_R(t, particles, args),
        "dissipation": group_weighted(v, layer_scales(particles)),
        "max_speed": jnp.max(speeds),
        "mean_speed": jnp.mean(speeds),
        "train_rmse": train_rmse(t, particles, args),
        "test_rmse": test_rmse(t, particles, args),
    }


# Q and R only (cheap: no velocity), for solves that do not want the rest.
BASIC_OBSERVABLES = {"Q": objective_Q, "R": risk_R}


# --------------------------------------------------------------------------- clouds


def clouds(particles: Particles) -> tuple[jax.Array, jax.Array]:
    """(attention cloud (L, M, 2 D^2), MLP cloud (L, M_mlp, 2 D)) of a particle dict: every particle as one
    point, (V, W) flattened and joined for attention, (W1, W2) for the MLP."""
    L, M = particles["V"].shape[:2]
    att = jnp.concatenate([particles["V"].reshape(L, M, -1), particles["W"].reshape(L, M, -1)], axis=-1)
    mlp = jnp.concatenate([particles["W1"], particles["W2"]], axis=-1)
    return att, mlp


def _w2_exact(x, y):
    ot = require("ot", "ot", purpose="w2_per_slice(method='exact')")  # POT, the exact network-simplex oracle

    x, y = np.asarray(x, float), np.asarray(y, float)
    a = np.full(x.shape[0], 1.0 / x.shape[0])
    b = np.full(y.shape[0], 1.0 / y.shape[0])
    cost = cdist(x, y, "sqeuclidean")  # exact differences (ot.dist expands |x|^2 + |y|^2 - 2 x.y)
    return float(np.sqrt(max(ot.emd2(a, b, cost, numItermax=1_000_000), 0.0)))


def _w2_sinkhorn(x, y, epsilon):
    sinkdiv = require("ott.tools.sinkhorn_divergence", "ot", purpose="w2_per_slice(method='sinkhorn')").sinkdiv

    # ott-jax broadcasts implicitly and mixes dtypes: allow that locally under strict user settings
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        div = sinkdiv(jnp.asarray(x), jnp.asarray(y), epsilon=epsilon)[0]
    return jnp.sqrt(jnp.maximum(div, 0.0))


@xla_jit
def _w2_sinkhorn_batch(x, y, epsilon):
    """`_w2_sinkhorn` of every problem k of x (K, n, dim) and y (K, m, dim) in one program (compiled once per
    shape; epsilon is traced, so a new value does not recompile)."""
    return jax.vmap(lambda u, w: _w2_sinkhorn(u, w, epsilon))(x, y)


def _pad_features(z, dim):
    """z (K, n, d) -> (K, n, dim), zeros appended to every point."""
    return jnp.pad(jnp.asarray(z), ((0, 0), (0, 0), (0, dim - z.shape[2])))


def _sinkhorn_groups(pairs: dict, epsilon: float) -> dict:
    """W2_epsilon per slice of every group in `pairs` (group -> (x (L, n, dim), y (L, m, dim))): groups of
    equal cloud sizes (n, m) share one vmapped program, their features zero-padded to a common dimension
    (which leaves every squared distance, hence the divergence, unchanged)."""
    by_size: dict = {}
    for group, (x, y) in pairs.items():
        by_size.setdefault((x.shape[1], y.shape[1]), []).append(group)
    out = {}
    for groups in by_size.values():
        dim = max(pairs[g][0].shape[2] for g in groups)
        x = jnp.concatenate([_pad_features(pairs[g][0], dim) for g in groups])
        y = jnp.concatenate([_pad_features(pairs[g][1], dim) for g in groups])
        w = np.asarray(_w2_sinkhorn_batch(x, y, jnp.asarray(epsilon, x.dtype)))
        start = 0
        for g in groups:
            n = pairs[g][0].shape[0]
            out[g] = w[start : start + n]
            start += n
    return out


def w2_per_slice(a: Particles, b: Particles, method: str = "exact", epsilon: float = 1e-2) -> dict:
    """W2 between the particle clouds `a` and `b` (particle dicts of equal depth L) at every depth slice.

    Returns `{"attention": (L,), "mlp": (L,)}`. `method="exact"`: POT's `ot.emd2` on the squared Euclidean
    cost (exact; clouds up to a few thousand points); `"sinkhorn"`: sqrt of ott-jax's debiased Sinkhorn
    divergence at regularisation `epsilon` (squared-distance units; jit-able; equals the exact W2 of a
    translated cloud and converges to W2 as epsilon -> 0). The clouds may have different widths. Sinkhorn
    runs every slice of both groups in one jitted, vmapped ott-jax program per pair of cloud sizes (one
    compilation when the attention and MLP widths agree; epsilon does not recompile). Its bias is bounded by
    `sinkhorn_bias_bound`.
    """
    check_choice("method", method, ("exact", "sinkhorn"))
    epsilon = check_real("epsilon", epsilon, low=0.0, strict=True)
    for name, p in (("a", a), ("b", b)):
        if not isinstance(p, dict) or set(p) != set(GROUPS):
            raise ValueError(f"{name} must be a particle dict with keys {GROUPS}")
    if a["V"].shape[0] != b["V"].shape[0] or a["V"].shape[2:] != b["V"].shape[2:]:
        raise ValueError(
            f"a and b must have the same depth L and dimension D, got V shapes {a['V'].shape} and {b['V'].shape}"
        )
    ca, cb = clouds(a), clouds(b)
    pairs = {"attention": (ca[0], cb[0]), "mlp": (ca[1], cb[1])}
    if method == "sinkhorn":
        return _sinkhorn_groups(pairs, epsilon)
    return {group: np.array([_w2_exact(x[k], y[k]) for k in range(x.shape[0])]) for group, (x, y) in pairs.items()}


def sinkhorn_bias_bound(epsilon: float, n: int, m: int) -> float:
    """eps (log n + log m) / 2: a bound on |S_eps - W2^2| for uniform clouds of n and m points, S_eps the
    debiased Sinkhorn divergence of `w2_per_slice(method="sinkhorn")` at convergence.

    With OT_eps = min_P <C, P> + eps KL(P | a b^T) (ott-jax's regularised cost) and 0 <= KL(P | a b^T)
    <= log min(n, m) for a coupling of uniform marginals, OT_eps(a, b) - W2^2 lies in [0, eps log min(n, m)]
    and OT_eps(a, a), OT_eps(b, b) in [0, eps log n], [0, eps log m]; so S_eps - W2^2 lies in
    [-eps (log n + log m) / 2, eps log min(n, m)]. For the square roots, |sqrt(S_eps) - W2| <= bound / W2.
    """
    epsilon = check_real("epsilon", epsilon, low=0.0, strict=True)
    n, m = check_int("n", n, 1), check_int("m", m, 1)
    return epsilon * (np.log(n) + np.log(m)) / 2.0


def coupled_rms(a: Particles, b: Particles) -> float:
    """sqrt((1/(L M)) sum_{l,j} |theta^a_{l,j} - theta^b_{l,j}|^2 + the same over MLP particles): the RMS
    distance of two coupled clouds of equal shape (>= the mean W2 per slice)."""
    for k in GROUPS:
        if jnp.shape(a[k]) != jnp.shape(b[k]):
            raise ValueError(
                f"a[{k!r}] and b[{k!r}] must have the same shape, got {jnp.shape(a[k])} and {jnp.shape(b[k])}"
            )
    diff = {k: jnp.asarray(a[k]) - jnp.asarray(b[k]) for k in GROUPS}
    return float(jnp.sqrt(group_weighted(diff, layer_scales(diff))))


def first_variation(config: Config, particles: Particles, data: Prompts, probes: dict) -> dict:
    """The data part of delta Q/delta rho at probe particles, per depth slice.

    `probes`: `{"V": (P, D, D), "W": (P, D, D)}` and/or `{"W1": (Pm, D), "W2": (Pm, D)}`. Returns
    `{"attention": (L, P)}` and/or `{"mlp": (L, Pm)}` with
    g_att(theta, l) = sum_prompts <P_{2l+1}, f(Z_{2l}, theta)>, g_mlp(w, l) = sum_prompts <P_{2l+2}, h(Z_{2l+1}, w)>,
    where P_k = dR/dZ_k. Its gradient at a particle of the network is -v - lam theta (tests).
    """
    particles, data = check_particles(config, particles), check_data(config, data)
    att = mlp = None
    if "V" in probes or "W" in probes:
        att = (jnp.asarray(probes["V"]), jnp.asarray(probes["W"]))
        if att[0].ndim != 3 or att[0].shape[1:] != (config.D, config.D) or att[1].shape != att[0].shape:
            raise ValueError(f"probes V and W must have shape (P, {config.D}, {config.D})")
    if "W1" in probes or "W2" in probes:
        mlp = (jnp.asarray(probes["W1"]), jnp.asarray(probes["W2"]))
        if mlp[0].ndim != 2 or mlp[0].shape[1] != config.D or mlp[1].shape != mlp[0].shape:
            raise ValueError(f"probes W1 and W2 must have shape (P, {config.D})")
    if att is None and mlp is None:
        raise ValueError("probes must hold V and W (attention) and/or W1 and W2 (MLP)")
    return _first_variation(particles, data.Z0, data.y, jnp.asarray(config.threshold), jnp.asarray(config.d), att, mlp)


@xla_jit
def _first_variation(particles, Z0, y, threshold, d, att, mlp):
    Z_att, Z_mlp, P_att, P_mlp = adjoint_states(particles, Z0, y, threshold, d)
    out = {}
    if att is not None:
        V, W = att

        def g_att(Za, Pa):  # one layer, every probe
            return jax.vmap(lambda v, w: jnp.sum(Pa * attention_update(Za, v[None], w[None])))(V, W)

        out["attention"] = jax.vmap(g_att)(Z_att, P_att)
    if mlp is not None:
        W1, W2 = mlp

        def g_mlp(Zm, Pm):
            return jax.vmap(lambda u, w: jnp.sum(Pm * mlp_update(Zm, u[None], w[None], threshold)))(W1, W2)

        out["mlp"] = jax.vmap(g_mlp)(Z_mlp, P_mlp)
    return out
