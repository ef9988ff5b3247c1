"""The right-hand sides of the three systems written in plain numpy, as a careful user of scipy would write them,
and the scipy side of `bench_solve` (run in its own process: `scipy_main`).

- `cooccurrence_rhs`: the exact Gram ODE of `flows.cooccurrence.flow` (gathers, two scatter-adds by
  `np.bincount` on precomputed flat indices, d x d matmuls).
- `scan_snap_reduced_rhs`: the quasi-static reduced Z-flow of `flows.scan_snap.flow.reduced_vector_field`.
- `mean_field_rhs`: the particle velocity of `flows.mean_field` in its first-variation form (a forward pass
  storing every sublayer input, a backward pass for the adjoints P_k, the closed-form per-particle gradients
  of `flows.mean_field.gradients`), all as broadcast `np.matmul` over (prompt, head).

Every RHS maps `(t, state dict, args dict of numpy arrays)` to a dict of the same shapes; `make_flat_rhs`
wraps one for `scipy.integrate.solve_ivp` on the flat vector (keys in sorted order, as `jax.tree_util`
flattens a dict). This module imports numpy and scipy only (no JAX), so the scipy subprocess measures numpy
alone; `tests/test_bench_solve.py` checks each RHS against the JAX vector field.
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
from scipy.special import expit

__all__ = [
    "RHS",
    "cooccurrence_rhs",
    "flatten",
    "load_problem",
    "make_flat_rhs",
    "mean_field_rhs",
    "prepare",
    "scan_snap_reduced_rhs",
    "scipy_main",
    "shapes_of",
    "unflatten",
]


# --------------------------------------------------------------------------- state layout


def flatten(state: dict) -> np.ndarray:
    """The state dict as one float vector, keys in sorted order (the order of `jax.tree_util.tree_leaves`)."""
    return np.concatenate([np.ravel(np.asarray(state[k], dtype=float)) for k in sorted(state)])


def shapes_of(state: dict) -> list:
    """[(key, shape)] in sorted key order."""
    return [(k, tuple(np.shape(state[k]))) for k in sorted(state)]


def unflatten(vec: np.ndarray, shapes) -> dict:
    """Inverse of `flatten` for `shapes = shapes_of(state)` (views into `vec`)."""
    out, start = {}, 0
    for k, shape in shapes:
        size = math.prod(shape)
        out[k] = vec[start : start + size].reshape(shape)
        start += size
    return out


# --------------------------------------------------------------------------- co-occurrence Gram ODE


def prepare_cooccurrence(args: dict, shapes: dict) -> dict:
    """Precompute what a careful user computes once: int tokens and the flat scatter index of B."""
    tokens = np.asarray(args["tokens"]).astype(np.intp)
    d = shapes["G"][0]
    out = {k: np.asarray(v) for k, v in args.items() if k in ("labels", "sqrt_m", "m1")}
    out["tokens"] = tokens
    out["_flat_dd"] = (tokens[:, :, None] * d + tokens[:, None, :]).ravel()
    return out


def cooccurrence_rhs(t, state, args):
    """d(Gram state)/dt (see `flows.cooccurrence.flow`): state G (d,), S (), M_V, M_K, M_Q, A (d, d); args
    tokens (n, L), labels (n,), sqrt_m, m1 (and, from `prepare_cooccurrence`, the flat index of B)."""
    G, S, M_V, M_K, M_Q, A = (state[k] for k in ("G", "S", "M_V", "M_K", "M_Q", "A"))
    tokens, labels = args["tokens"], args["labels"]
    sqrt_m, m1 = float(args["sqrt_m"]), float(args["m1"])
    n = tokens.shape[0]
    d = G.shape[0]
    s = A[tokens[:, :, None], tokens[:, None, :]] / sqrt_m  # (n, L, L), softmax over keys h (axis 1)
    s = s - s.max(axis=1, keepdims=True)
    e = np.exp(s)
    p = e / e.sum(axis=1, keepdims=True)
    Gx = G[tokens]  # (n, L)
    mean_G = np.einsum("nh,nhl->nl", Gx, p)  # Gx^T p_l
    F = mean_G.sum(axis=1)
    c = expit(-labels * F) * labels / n
    z = np.bincount(tokens.ravel(), weights=(c[:, None] * p.sum(axis=2)).ravel(), minlength=d)
    r = c[:, None, None] * p * (Gx[:, :, None] - mean_G[:, None, :])
    flat = args.get("_flat_dd")
    if flat is None:
        flat = (tokens[:, :, None] * d + tokens[:, None, :]).ravel()
    B = np.bincount(flat, weights=r.ravel(), minlength=d * d).reshape(d, d)
    Gz = np.outer(G, z)
    AB = A @ B.T
    AtB = A.T @ B
    return {
        "G": S * z + m1 * (M_V @ z),
        "S": np.asarray(2.0 * m1 * (G @ z)),
        "M_V": Gz + Gz.T,
        "M_K": (AB + AB.T) / sqrt_m,
        "M_Q": (AtB + AtB.T) / sqrt_m,
        "A": (M_K @ B + B @ M_Q) / sqrt_m,
    }


# --------------------------------------------------------------------------- Scan and Snap reduced Z-flow


def _gamma_of_h(h, M):
    e = np.exp(-M * h)
    return (M - 1.0) ** 2 * h * e / ((M - 1.0) * e + 1.0)


def prepare_scan_snap(args: dict, shapes: dict) -> dict:
    out = {k: np.asarray(v) for k, v in args.items()}
    out["_on"] = out["cond"] > 0
    return out


def scan_snap_reduced_rhs(t, state, args):
    """d{Z, h, B}/dt of the quasi-static reduced Z-flow (`flows.scan_snap.flow.reduced_vector_field`)."""
    Z, h = state["Z"], float(state["h"])
    cond, Q = args["cond"], args["Q"]
    on = args["_on"] if "_on" in args else cond > 0
    K, Md = float(args["K"]), float(args["Md"])
    zq = Q @ Z  # (K, M)
    zmax = np.max(np.where(on, zq, -np.inf), axis=-1, keepdims=True)
    w = cond * np.exp(np.where(on, zq - zmax, 0.0))
    c = w / w.sum(axis=-1, keepdims=True)
    f = c / np.linalg.norm(c, axis=-1, keepdims=True)
    Ginv = np.linalg.inv(f @ f.T)
    gt = Ginv @ f
    gt_c = gt - float(args["center"]) * gt.mean(axis=0, keepdims=True) * (K / Md)
    gamma = _gamma_of_h(h, Md) * float(args["scale"])
    perp = gt_c - f * np.sum(f * gt_c, axis=-1, keepdims=True)
    xi = gamma * (np.diagonal(Ginv) - np.sum(f * gt, axis=-1))
    weights = args["w"]
    eta_Z = float(args["eta_Z"])
    rows = (weights * gamma)[:, None] * f * perp
    return {
        "Z": eta_Z * (Q.T @ rows),
        "h": np.asarray(float(args["eta_Y"]) / (K * ((Md - 1.0) + math.exp(Md * h)))),
        "B": eta_Z * weights * xi,
    }


# --------------------------------------------------------------------------- mean-field particle velocity


def _huber(z, h0):
    pos = np.maximum(z, 0.0)
    return np.where(z > h0, z - 0.5 * h0, 0.5 * pos * pos / h0)


def _huber_grad(z, h0):
    return np.clip(z / h0, 0.0, 1.0)


def prepare_mean_field(args: dict, shapes: dict) -> dict:
    return {
        "Z0": np.asarray(args["Z0"]),
        "y": np.asarray(args["y"]),
        "lam": float(args["lam"]),
        "threshold": float(args["threshold"]),
        "d": int(args["d"]),
    }


def mean_field_rhs(t, particles, args):
    """-(M L) dQ/d theta per attention particle, -(M_mlp L) dQ/d w per MLP particle (the velocity of
    `flows.mean_field.vector_field`), by a forward pass, a backward pass of adjoints and the closed-form
    per-particle gradients (module docstring of `flows.mean_field.gradients`)."""
    V, W, W1, W2 = (particles[k] for k in ("V", "W", "W1", "W2"))
    Z0, y = args["Z0"], args["y"]
    lam, h0, d = float(args["lam"]), float(args["threshold"]), int(args["d"])
    L, M = V.shape[:2]
    Mm = W1.shape[1]
    sa, sm = 1.0 / (M * L), 1.0 / (Mm * L)
    n = Z0.shape[0]
    Z = Z0
    tape = []
    for layer in range(L):
        Zt = Z[:, None]  # (n, 1, D, K)
        WZ = W[layer][None] @ Zt  # (n, M, D, K): W_m z_i
        logits = np.swapaxes(Zt, -1, -2) @ WZ  # (n, M, K, K): z_k^T W_m z_i
        logits = logits - logits.max(axis=2, keepdims=True)
        S = np.exp(logits)
        S /= S.sum(axis=2, keepdims=True)  # softmax over keys k
        T = Zt @ S  # (n, M, D, K) = Z S_m
        att = np.einsum("mcd,nmdi->nci", V[layer], T, optimize=True)
        Z1 = Z + sa * att
        pre = W1[layer] @ Z1  # (n, Mm, K)
        Z2 = Z1 + sm * (W2[layer].T @ _huber(pre, h0))
        tape.append((Z, WZ, S, T, Z1, pre))
        Z = Z2
    P = np.zeros_like(Z)
    P[:, d, -1] = (Z[:, d, -1] - y) / n
    grads = {k: np.empty_like(v) for k, v in particles.items()}
    for layer in reversed(range(L)):
        Za, WZ, S, T, Z1, pre = tape[layer]
        # MLP sublayer Z1 -> Z1 + sm W2^T sigma(W1 Z1); P is the adjoint of its output
        grads["W2"][layer] = np.einsum("njk,nck->jc", _huber(pre, h0), P, optimize=True)
        cm = (W2[layer] @ P) * _huber_grad(pre, h0)  # (n, Mm, K)
        grads["W1"][layer] = np.einsum("njk,ndk->jd", cm, Z1, optimize=True)
        P1 = P + sm * (W1[layer].T @ cm)
        # attention sublayer Za -> Za + sa sum_m V_m Za S_m; P1 is the adjoint of its output
        P1t = P1[:, None]  # (n, 1, D, K)
        grads["V"][layer] = np.einsum("nci,nmdi->mcd", P1, T, optimize=True)
        Zt = Za[:, None]
        VZ = V[layer][None] @ Zt  # (n, M, D, K)
        Bm = np.swapaxes(VZ, -1, -2) @ P1t  # (n, M, K, K): (V_m z_k) . p_i
        G = S * (Bm - np.sum(S * Bm, axis=2, keepdims=True))
        ZG = Zt @ G  # (n, M, D, K)
        grads["W"][layer] = np.sum(ZG @ np.swapaxes(Zt, -1, -2), axis=0)  # sum_n Z G_m Z^T
        back = (np.swapaxes(V[layer], -1, -2)[None] @ P1t) @ np.swapaxes(S, -1, -2)  # V_m^T P S_m^T
        back += WZ @ np.swapaxes(G, -1, -2)  # W_m Z G_m^T
        back += np.swapaxes(W[layer], -1, -2)[None] @ ZG  # W_m^T Z G_m
        P = P1 + sa * back.sum(axis=1)
    return {k: -grads[k] - lam * particles[k] for k in particles}


#: system name -> (rhs, prepare(args, {key: shape}) -> numpy args)
RHS = {
    "cooccurrence": (cooccurrence_rhs, prepare_cooccurrence),
    "scan_snap_reduced": (scan_snap_reduced_rhs, prepare_scan_snap),
    "mean_field": (mean_field_rhs, prepare_mean_field),
}


def prepare(system: str, args: dict, shapes) -> dict:
    """Numpy args of `system` from the JAX args dict and the state layout `shapes_of(state)` (arrays
    converted, indices precomputed)."""
    if system not in RHS:
        raise ValueError(f"system must be one of {sorted(RHS)}, got {system!r}")
    return RHS[system][1]({k: np.asarray(v) for k, v in args.items()}, dict(shapes))


def make_flat_rhs(system: str, shapes, args: dict):
    """`f(t, y_flat) -> dy_flat` for `scipy.integrate.solve_ivp`; `args` as returned by `prepare`."""
    rhs = RHS[system][0]

    def f(t, y):
        return flatten(rhs(t, unflatten(y, shapes), args))

    return f


# --------------------------------------------------------------------------- the scipy side of bench_solve


def _kernel() -> list:
    try:
        import threadpoolctl
    except ImportError:
        return []
    return [
        {k: lib.get(k) for k in ("internal_api", "architecture", "version", "num_threads")}
        for lib in threadpoolctl.threadpool_info()
    ]


def load_problem(path):
    """(system, shapes, y0 flat, numpy args, t1, reference final state flat) from a `bench_solve` npz."""
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        args = {k[len("arg_") :]: z[k] for k in z.files if k.startswith("arg_")}
        y0, ref = z["y0"], z["ref"]
    shapes = [(k, tuple(s)) for k, s in meta["shapes"]]
    return meta["system"], shapes, y0, prepare(meta["system"], args, shapes), float(meta["t1"]), ref


def scipy_main(path, runs, repeats: int, budget_s: float = 20.0) -> dict:
    """Solve the problem saved at `path` with `scipy.integrate.solve_ivp` for each `(method, rtol, atol)` of
    `runs`; return (and print as the last JSON line) the best-of-`repeats` run time (fewer repeats once a
    method has taken `budget_s`; the count is returned), nfev, accepted steps,
    status, the relative max-norm error at t1 against the saved reference, the time of one RHS call and the
    BLAS kernel numpy ran with."""
    from scipy.integrate import solve_ivp

    system, shapes, y0, args, t1, ref = load_problem(path)
    f = make_flat_rhs(system, shapes, args)
    f(0.0, y0)
    k = max(3, min(200, int(0.2 / max(1e-6, _time_once(f, y0)))))
    begin = time.perf_counter()
    for _ in range(k):
        f(0.0, y0)
    rhs_s = (time.perf_counter() - begin) / k
    scale = float(np.max(np.abs(ref)))
    out = []
    for method, rtol, atol in runs:
        best, sol, done, spent = float("inf"), None, 0, 0.0
        while done < max(1, int(repeats)) and (done == 0 or spent < budget_s):  # slow solves: fewer repeats
            begin = time.perf_counter()
            sol = solve_ivp(f, (0.0, t1), y0, method=method, rtol=rtol, atol=atol)
            took = time.perf_counter() - begin
            best, done, spent = min(best, took), done + 1, spent + took
        err = float(np.max(np.abs(sol.y[:, -1] - ref)) / scale)
        out.append(
            {
                "method": method,
                "rtol": rtol,
                "atol": atol,
                "run_s_min": best,
                "repeats": done,
                "nfev": int(sol.nfev),
                "steps": int(sol.t.size - 1),
                "status": int(sol.status),
                "message": str(sol.message),
                "error": err,
            }
        )
    result = {"system": system, "rhs_call_s": rhs_s, "runs": out, "numpy_kernel": _kernel(), "numpy": np.__version__}
    print(json.dumps(result))
    return result


def _time_once(f, y0) -> float:
    begin = time.perf_counter()
    f(0.0, y0)
    return time.perf_counter() - begin
