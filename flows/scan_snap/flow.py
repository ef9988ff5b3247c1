"""The T -> infinity flows of Scan and Snap (Tian et al. 2023), integrated with `flows.solve`: the full (Y, Z)
population gradient flow (Lemma 1, eq. 4 at T -> infinity, Lemma 2, eq. 5), the quasi-static reduced Z-flow
(Lemma 4, eq. 10) with the decoder scalar h and B_n (Theorem 1), the single-common-token flow (eq. 13), the
class-symmetric reduced flow, and the optimiser limits of the full flow. See docs/systems/scan_snap.md."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import check_bool, check_choice, check_int, check_real, real_array
from .._solve import FlowError, Trajectory, solve, solve_batch
from ..optim_limits.problem import OPTIMIZERS
from ..optim_limits.problem import limit_problem as optimizer_limit
from . import observables as obs
from .data import SequenceClasses
from .network import check_rates, seed_init
from .theory import gamma_of_h

__all__ = [
    "flow_args",
    "full_vector_field",
    "limit_problem",
    "population_loss",
    "reduced_vector_field",
    "single_ct_vector_field",
    "symmetric_vector_field",
    "slaved_decoder",
    "solve_flow",
    "solve_single_common_token",
]

Array = jax.Array
Args = dict[str, Any]


def flow_args(
    classes: SequenceClasses,
    eta_Y: Any,
    eta_Z: Any,
    *,
    paper_time: bool = True,
    exact_slaving: bool = False,
    decoder_size: float | None = None,
    dtype: Any = None,
    query_rows: bool = False,
) -> Args:
    """The traced parameters of both vector fields (arrays; new values do not recompile).

    `query_rows=True`: the vector fields then take Z as its L query-token rows only, (L, M) in the order of
    `classes.query_tokens` (`Q` is (K, L)): the other rows of Z never enter c_n and never move, so this state
    is exact and M / L times smaller (what `solve_flow` integrates).
    """
    dtype = dtype or jnp.result_type(float)
    K, M = classes.num_classes, classes.vocab_size
    Md = float(decoder_size or M)
    rows = {q: i for i, q in enumerate(classes.query_tokens)} if query_rows else {q: q for q in range(M)}
    Q = np.zeros((K, len(rows)))
    Q[np.arange(K), [rows[q] for q in classes.query]] = 1.0
    E = np.zeros((K, M))
    E[np.arange(K), classes.next_token] = 1.0
    p = np.asarray(classes.class_probs)
    weights = p if (exact_slaving or not paper_time) else K * p
    a = dict(cond=classes.cond_probs, Q=Q, E=E, p=p, w=weights, eta_Y=eta_Y, eta_Z=eta_Z, K=K, Md=Md)
    a["center"], a["scale"] = (1.0, (Md / (Md - 1.0)) ** 2) if exact_slaving else (0.0, 1.0)
    out = {k: jnp.asarray(v, dtype) for k, v in a.items()}
    return out | {"next": jnp.asarray(np.asarray(classes.next_token, np.int32))}


def population_loss(params: dict[str, Array], args: Args) -> Array:
    """sum_n P(n) (-log softmax(Y^T f_n)_n), the T -> infinity loss (minus eq. 2), as `loss(theta, batch)`
    on `flow_args` (`observables.population_loss`)."""
    c = obs.attention(params["Z"], args["cond"], args["Q"])
    return obs.population_loss(c, params["Y"], args["next"], args["p"])


def full_vector_field(t: Any, y: dict[str, Array], args: Args) -> dict[str, Array]:
    """d{Y, Z}/dt of the population gradient flow at T -> infinity (Lemma 1, eq. 4; Lemma 2, eq. 5):
    Y_dot = eta_Y sum_n P(n) f_n (e_n - alpha_n)^T, z_m_dot = eta_Z sum_{psi(n) = m} P(n) diag(f_n) P^perp_{f_n}
    Y (e_n - alpha_n), alpha_n = softmax(Y^T f_n)."""
    Y, Z = y["Y"], y["Z"]
    f = obs.normalized_attention(obs.attention(Z, args["cond"], args["Q"]))  # (K, M)
    alpha = jax.nn.softmax(f @ Y, axis=-1)
    resid = args["E"] - alpha  # e_n - alpha_n, (K, M)
    pf = args["p"][:, None] * f
    Y_dot = args["eta_Y"] * (pf.T @ resid)
    g = resid @ Y.T  # g_n = Y (e_n - alpha_n)
    perp = g - f * jnp.sum(f * g, axis=-1, keepdims=True)
    Z_dot = args["eta_Z"] * (args["Q"].T @ (pf * perp))
    return {"Y": Y_dot, "Z": Z_dot}


def h_rate(h: Any, M: Any, eta_Y: Any, K: Any) -> Array:
    """dh/dt = eta_Y / (K ((M - 1) + e^{M h})): the decoder's scalar h = h(t/K) (Theorem 1, Lemma 4)."""
    return eta_Y / (K * ((M - 1.0) + jnp.exp(M * h)))


def _reduced_parts(Z, h, args):
    f = obs.normalized_attention(obs.attention(Z, args["cond"], args["Q"]))
    G = f @ f.T  # F^T F in the paper's notation, (K, K)
    Ginv = jnp.linalg.inv(G)
    gt = Ginv @ f  # row n: (F^dagger)^T e_n = sum_j Ginv_{jn} f_j (Ginv symmetric)
    gt_c = gt - args["center"] * jnp.mean(gt, axis=0, keepdims=True) * (args["K"] / args["Md"])
    gamma = gamma_of_h(h, args["Md"]) * args["scale"]
    perp = gt_c - f * jnp.sum(f * gt_c, axis=-1, keepdims=True)
    xi = gamma * (jnp.diagonal(Ginv) - jnp.sum(f * gt, axis=-1))  # gamma sum_{n'!=n} beta f_n.f_n'
    return f, gamma, perp, xi


def reduced_vector_field(t: Any, y: dict[str, Array], args: Args) -> dict[str, Array]:
    """d{Z, h, B}/dt of the quasi-static reduced Z-flow (Lemma 4, eq. 10): z_m_dot = eta_Z gamma
    sum_{psi(n) = m} w_n diag(f_n) P^perp_{f_n} (F^dagger)^T e_n, dh/dt = `h_rate`, B_n_dot = eta_Z w_n xi_n
    (Theorem 1a); `exact_slaving` keeps the O(1/M) terms (docs/systems/scan_snap.md)."""
    Z, h = y["Z"], y["h"]
    f, gamma, perp, xi = _reduced_parts(Z, h, args)
    rows = (args["w"] * gamma)[:, None] * f * perp
    Z_dot = args["eta_Z"] * (args["Q"].T @ rows)
    h_dot = h_rate(h, args["Md"], args["eta_Y"], args["K"])
    B_dot = args["eta_Z"] * args["w"] * xi
    return {"Z": Z_dot, "h": h_dot, "B": B_dot}


def slaved_decoder(Z: Array, h: Any, args: Args) -> Array:
    """The quasi-static decoder Y = (F^dagger)^T W with w_n = (M-1) h zeta_n (Theorem 5 / Lemma 6), (M, M)."""
    f = obs.normalized_attention(obs.attention(Z, args["cond"], args["Q"]))
    M = args["Md"]
    zeta = (M / (M - 1.0)) * (args["E"] - 1.0 / M)
    W = (M - 1.0) * h * zeta  # (K, M)
    return f.T @ jnp.linalg.inv(f @ f.T) @ W


# --- observables saved along the flows (module-level so the compiled solve is cached) ----------------------
def _obs_full(t, y, args):
    """The attention observables (`observables.attention_observables`, as on the network record) and the loss
    from one evaluation of c_n (one function: the intermediate is shared)."""
    c = obs.attention(y["Z"], args["cond"], args["Q"])
    return {
        **obs.attention_observables(c, args["cond"]),
        "loss": obs.population_loss(c, y["Y"], args["next"], args["p"]),
    }


def _obs_reduced(t, y, args):
    c = obs.attention(y["Z"], args["cond"], args["Q"])
    return {**obs.attention_observables(c, args["cond"]), "gamma": gamma_of_h(y["h"], args["Md"])}


def _rates(eta_Y, eta_Z, lr=None):
    """Validated rates (`network.check_rates`): two floats, or two 1-D arrays of one length R (a sweep), and R."""
    (nY, eY), (nZ, eZ) = check_rates(eta_Y, eta_Z, lr)
    if eY.ndim == 0 and eZ.ndim == 0:
        return float(eY), float(eZ), None
    try:
        eY, eZ = np.broadcast_arrays(np.atleast_1d(eY), np.atleast_1d(eZ))
    except ValueError:
        raise ValueError(f"{nY} and {nZ} must have one length, got {eY.shape} and {eZ.shape}") from None
    return eY, eZ, eY.size


def check_ts(ts: Any, positive_end: bool = True) -> np.ndarray:
    """`ts` as a float array, or a ValueError unless it is a non-empty, non-decreasing 1-D array of finite times
    >= 0 (`positive_end`: ending at a time > 0)."""
    ts = real_array("ts", ts, finite=False)
    if ts.ndim != 1 or ts.size < 1 or not np.all(np.isfinite(ts)) or np.any(ts < 0) or np.any(np.diff(ts) < 0):
        raise ValueError("ts must be a non-empty, non-decreasing 1-D array of finite times >= 0")
    if positive_end and ts[-1] <= 0:
        raise ValueError("ts must end at a time > 0")
    return ts


class _EachFlowsTime:
    """The default of `solve_flow(paper_time=...)`: the paper's time for the reduced flow, the network's
    clock for the full flow (a sentinel, so that `None` stays an invalid value)."""

    def __repr__(self):
        return "<True for the reduced flow, False for the full flow>"


_EACH_FLOWS_TIME: Any = _EachFlowsTime()


def solve_flow(
    classes: SequenceClasses,
    eta_Y: Any = None,
    eta_Z: Any = None,
    ts: Any = None,
    reduced: bool = False,
    *,
    lr: Any = None,
    Y0: Any = None,
    Z0: Any = None,
    paper_time: bool = _EACH_FLOWS_TIME,
    exact_slaving: bool = False,
    decoder_size: float | None = None,
    solver: str = "auto",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int | None = None,
    throw: bool = True,
    init: str = "zero",
    seed: int = 0,
    optimizer: str | None = None,
    optim_args: dict | None = None,
) -> Trajectory:
    """Integrate the full (Y, Z) flow (`reduced=False`) or the reduced Z-flow (`reduced=True`) from
    Y0 = Z0 = 0 (default; or the given (M, M) arrays) and save at `ts`.

    `lr`: the rates as in every system, one number for both groups or {"Y": eta_Y, "Z": eta_Z} (instead of
    `eta_Y`, `eta_Z`; arrays for a sweep). `init`, `seed`: as in `network.train` (the same place in every
    system): `init="random"` starts from the initialisation `train(..., init="random", seed=seed)` draws (not
    with `Y0`/`Z0`); `"zero"` from zeros.

    Observables saved: the attention observables of the network record (`observables.ATTENTION_OBSERVABLES`:
    `attention` (K, M) c_n, `entropy`, `entropy_distinct`, `common_mass` (K,), computed by the same
    `observables.attention_observables`), and `loss` (full flow) or `gamma` (reduced flow). States:
    full {"Y", "Z"}; reduced {"Z", "h" = h(t/K), "B" (K,) = B_n(t)}. `decoder_size` is the M of gamma
    (default the vocabulary size); it and `exact_slaving` (the slaved decoder) shape the reduced flow only.
    Other arguments as in `flows.solve`.

    **Time** (`paper_time`, `True` or `False`; when not given, `True` for the reduced flow and `False` for
    the full flow). `False` runs on the network's clock (one batch-mean step of rate eta = one unit; class
    weights P(n)). `True` is the paper's time of Lemma 4, which drops P(n) = 1/K from the Z-flow only: the
    reduced flow weights its Z rows w_n = K P(n) (P(n) with `exact_slaving=True`), and the full flow moves Z
    at the rate K eta_Z (the same weights; Y keeps its rate, as h does in the reduced flow). The optimiser
    limits (`optimizer=...`) run on the network's clock only: `paper_time=True` is refused there.

    **Sweeps.** `eta_Y` and/or `eta_Z` may be 1-D arrays (broadcast against each other): the flow is then
    solved for every pair in one vmapped, once-compiled `flows.solve_batch` call, every field of the
    `Trajectory` gains a leading axis, and failed members are reported in `status` (raised only with
    `throw=True`, as for a single solve).

    **Optimiser limits** (full flow, one (eta_Y, eta_Z) pair): `optimizer` None (default) integrates the
    hand-written field above; `"gd"`, `"momentum"`, `"sign"`, `"adam"` the limits of `train(optimizer="sgd")`,
    `train(optimizer="sgd", momentum=beta)`, sign SGD and `train(optimizer="adam")` on `population_loss`,
    each group on its own clock eta_g * step. `optim_args` as in every system
    (`flows.optim_limits.limit_problem`), less `"lr"`: the rates are eta_Y, eta_Z here; the sign smoothing
    defaults to eps = 1e-3. ts = step / (1 - beta) for momentum, step otherwise. States: {"Y", "Z"} plus the
    optimiser's own ("v"; "m", "v", "m_weight", "v_weight"; Z in them as its query rows); observables as for
    the full flow.
    """
    if not isinstance(classes, SequenceClasses):
        raise ValueError("classes must be a SequenceClasses")
    eta_Y, eta_Z, n = _rates(eta_Y, eta_Z, lr)
    reduced = check_bool("reduced", reduced)
    paper_time = reduced if paper_time is _EACH_FLOWS_TIME else check_bool("paper_time", paper_time)
    if ts is None:
        raise ValueError("ts must be given (the save times)")
    ts = check_ts(ts)
    if optimizer is not None:
        check_choice("optimizer", optimizer, OPTIMIZERS)
        if reduced or n:
            raise ValueError(
                "optimizer applies to the full flow at one (eta_Y, eta_Z) pair: reduced=False, scalar eta_Y and eta_Z"
            )
        if paper_time:
            raise ValueError(
                "paper_time must be False (or not given) with an optimizer: the optimiser limits "
                "run on the network's clock (class weights P(n))"
            )
        limit, limit_args = limit_problem(classes, eta_Y, eta_Z, optimizer, optim_args)
    elif optim_args is not None:
        raise ValueError("optim_args needs an optimizer ('gd', 'momentum', 'sign' or 'adam')")
    check_choice("init", init, ("zero", "random"))
    check_int("seed", seed, 0, 2**32 - 1, integral_float=True)
    if init == "random":
        if Y0 is not None or Z0 is not None:
            raise ValueError("init='random' draws Y0 and Z0: do not pass Y0 or Z0 with it")
        drawn = seed_init(classes.vocab_size, "random", seed)
        Y0, Z0 = np.asarray(drawn["Y"]), np.asarray(drawn["Z"])
    exact_slaving = check_bool("exact_slaving", exact_slaving)
    if decoder_size is not None:  # gamma and the slaved decoder divide by M - 1
        decoder_size = check_real("decoder_size", decoder_size, low=1.0, strict=True)
    dtype = jnp.result_type(float)
    np_dtype = np.dtype(dtype)
    M = classes.vocab_size
    # the state holds only the query rows of Z (flow_args(query_rows=True)); the full Z is rebuilt after
    opts: Args = dict(paper_time=paper_time, exact_slaving=exact_slaving, decoder_size=decoder_size, dtype=dtype)
    args = flow_args(classes, 1.0 if n else eta_Y, 1.0 if n else eta_Z, query_rows=True, **opts)
    if n:
        args = {k: jnp.broadcast_to(v, (n,) + v.shape) for k, v in args.items()}
        args["eta_Y"], args["eta_Z"] = jnp.asarray(eta_Y, dtype), jnp.asarray(eta_Z, dtype)
    if paper_time and not reduced and optimizer is None:
        # the full field weights its Z rows P(n); the paper's w_n = K P(n) is K times that
        args["eta_Z"] = args["eta_Z"] * classes.num_classes
    qt = list(classes.query_tokens)
    # numpy initial states: device transfers, not eager ops that each compile a small program on a first call
    Z0 = np.zeros((M, M), np_dtype) if Z0 is None else _square("Z0", Z0, M, np_dtype)
    common = dict(
        t1=float(ts[-1]), ts=ts, args=args, solver=solver, rtol=rtol, atol=atol, max_steps=max_steps, throw=throw
    )
    if not reduced:  # the reduced flow has no Y
        Y0 = np.zeros((M, M), np_dtype) if Y0 is None else _square("Y0", Y0, M, np_dtype)
    if optimizer is not None:
        vf, observables, y0 = limit.vector_field, _obs_limit, limit.initial_state({"Y": Y0, "Z": Z0[qt]})
        common["args"] = limit_args
    elif reduced:
        vf, observables = reduced_vector_field, _obs_reduced
        y0 = {"Z": Z0[qt], "h": np.zeros((), np_dtype), "B": np.zeros((classes.num_classes,), np_dtype)}
    else:
        vf, observables, y0 = full_vector_field, _obs_full, {"Y": Y0, "Z": Z0[qt]}
    try:
        traj = (solve_batch if n else solve)(vf, y0, observables=observables, **common)
    except FlowError as err:
        raise FlowError(str(err), _full_Z(err.trajectory, Z0, qt)) from None
    return _full_Z(traj, Z0, qt)


def _obs_limit(t, y, args):
    return _obs_full(t, y["theta"] if "theta" in y else y, args["batch"])


def limit_problem(
    classes: SequenceClasses, eta_Y: float, eta_Z: float, optimizer: str, optim_args: dict | None = None
) -> tuple[Any, Args]:
    """(limit, args) of `solve_flow(optimizer=...)`: `flows.optim_limits.limit_problem` on `population_loss`
    with the data of `flow_args(query_rows=True)` and each group on its own clock eta_Y, eta_Z (lr = 1: the
    clock is the step). Its state's Z is the (L, M) query rows of Z (`classes.query_tokens`). The limits run
    on the network's clock (the population loss weights the classes P(n)); the paper's time of the reduced
    flow has no meaning for them."""
    if not isinstance(classes, SequenceClasses):
        raise ValueError("classes must be a SequenceClasses")
    eta_Y, eta_Z, n = _rates(eta_Y, eta_Z)
    if n:
        raise ValueError("limit_problem takes one (eta_Y, eta_Z) pair")
    data = flow_args(classes, eta_Y, eta_Z, query_rows=True)
    return optimizer_limit(population_loss, optimizer, optim_args, data, lr=1.0, rates={"Y": eta_Y, "Z": eta_Z})


def _square(name, a, M, dtype):
    a = real_array(name, a).astype(dtype)
    if a.shape != (M, M):
        raise ValueError(f"{name} must be an (M, M) = ({M}, {M}) array, got shape {a.shape}")
    return a


def _full_Z(traj, Z0, qt):
    """The trajectory with ys["Z"] rebuilt as (..., M, M): Z0 outside the query rows (constant there); an
    optimiser limit's state {"theta": {"Y", "Z"}, moments...} flattened to {"Y", "Z", moments...}."""
    if traj is None or traj.ys is None:
        return traj
    ys = traj.ys
    if "theta" in ys:
        ys = {**ys["theta"], **{k: v for k, v in ys.items() if k != "theta"}}
    zq = np.asarray(ys["Z"])
    Z = np.array(np.broadcast_to(Z0, zq.shape[:-2] + Z0.shape))
    Z[..., qt, :] = zq
    return dataclasses.replace(traj, ys={**ys, "Z": Z})


def single_ct_vector_field(t: Any, y: Array, args: Args) -> Array:
    """Single common token (Sec. 6, eq. 13): state (h, z, B) with h = h(t/K),
    z_dot = -eta_Z gamma e^{4z} / C0, B_dot = eta_Z gamma e^{4z} / C0 (xi_n = gamma e^{4z} / C0)."""
    h, z = y[0], y[1]
    M = args["M"]
    h_dot = h_rate(h, M, args["eta_Y"], args["K"])
    rate = args["eta_Z"] * gamma_of_h(h, M) * jnp.exp(4.0 * z) / args["C0"]
    return jnp.stack([h_dot, -rate, rate])


def solve_single_common_token(
    M: float,
    K: float,
    eta_Y: float,
    eta_Z: float,
    ts: Any,
    C0: float = 1.0,
    *,
    rtol: float = 1e-12,
    atol: float = 1e-14,
) -> Trajectory:
    """Integrate eq. 13 (with the h-flow for gamma) from h = z = B = 0; `ys[:, 2]` is B_n(t)."""
    ts = check_ts(ts)
    dtype, vals = jnp.result_type(float), dict(M=M, K=K, eta_Y=eta_Y, eta_Z=eta_Z, C0=C0)
    args = {k: jnp.asarray(check_real(k, v, low=1.0 if k == "M" else 0.0, strict=True), dtype) for k, v in vals.items()}
    y0 = jnp.zeros((3,), dtype)
    return solve(single_ct_vector_field, y0, t1=float(ts[-1]), ts=ts, args=args, solver="dopri8", rtol=rtol, atol=atol)


def symmetric_vector_field(t: Any, y: Array, args: Args) -> Array:
    """The generated class-symmetric reduced flow (derivations `scan_snap-reduced-symmetric`) with the h-flow
    for gamma: state (h, z_d, z_c), h = h(t/K); args M (decoder size), K, eta_Y, eta_Z, p_d, p_c, D, C."""
    from .._generated import scan_snap_reduced_symmetric as gen

    h = y[0]
    M = args["M"]
    h_dot = h_rate(h, M, args["eta_Y"], args["K"])
    # the generated field takes exactly its PARAMS (M and eta_Y drive the h-flow here, not it)
    gargs = {**{k: args[k] for k in gen.PARAMS if k != "gamma"}, "gamma": gamma_of_h(h, M)}
    z_dot = gen.vector_field(t, y[1:], gargs)
    return jnp.concatenate([h_dot[None], z_dot])
