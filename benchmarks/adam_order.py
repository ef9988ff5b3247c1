"""The gap between `optax.adam` and its ODE limit (`flows.optim_limits.adam`) on a deep linear network, per
learning rate: where it is first order in lr, and where it is not.

The model: x -> W2 W1 x, 3-3-3, whitened inputs (E[x x^T] = I), so the loss is L = (1/2) ||W2 W1 - T||_F^2
(up to a constant) with the target T = U diag(3, 2, 1) V^T; a balanced start aligned with the target,
W1 = s V^T, W2 = s U (W2 W1 = s^2 U V^T). Adam with b1 = 1 - c1 lr, b2 = 1 - c2 lr (c1 = 10, c2 = 1,
eps = 1e-8) for t = lr * step in [0, 4] against the ODE; the gap is the max over the saved times of the
largest entry of |W2 W1 (Adam) - W2 W1 (ODE)|, and the local order between successive halvings of lr is
log2(gap(lr) / gap(lr / 2)).

`--clock` compares step k with the ODE at t = lr (k + offset) instead (offset 0.5 or 1: is the clock off by
a fraction of a step?).

    OUT=benchmarks/results/adam_order/gaps.json
    python benchmarks/adam_order.py --scales 1e-3 1e-2 0.1 --lrs 1e-2 3.125e-4 --out $OUT
    python benchmarks/adam_order.py --rotated --scales 1e-3 1e-2 0.1 --lrs 1e-2 9.765625e-6 --out $OUT
    python benchmarks/adam_order.py --rotated --scales 0.1 --lrs 1e-2 1.25e-3 --offsets 0 0.5 1 --out $OUT
    python benchmarks/adam_order.py --rotated --scales 0.1 1e-3 --lrs 2.5e-3 3.90625e-5 --modified --out $OUT

`--modified` holds the gap against the leading term lr e1(t) that Adam's modified equation predicts
(`modified_error`): max_t |gap(t) / lr - e1(t)| falls like lr where the expansion is asymptotic.

Not a timing benchmark (no `bench_` prefix: `python -m benchmarks` does not run it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from flows import optim_limits as ol

C1, C2, EPS, T_END = 10.0, 1.0, 1e-8, 4.0
SINGULAR = (3.0, 2.0, 1.0)


def loss(theta, batch):
    """(1/2) ||W2 W1 - T||_F^2: the whitened-input population loss of the linear network."""
    return 0.5 * jnp.sum((theta["W2"] @ theta["W1"] - batch["T"]) ** 2)


def frames(rotated: bool) -> tuple[np.ndarray, np.ndarray]:
    """(U, V): the identity, or two fixed random orthogonal matrices."""
    if not rotated:
        return np.eye(3), np.eye(3)
    rng = np.random.default_rng(0)
    return tuple(np.linalg.qr(rng.normal(size=(3, 3)))[0] for _ in range(2))  # type: ignore[return-value]


def problem(scale: float, rotated: bool = False) -> tuple[dict, dict]:
    """(theta0, batch) of the experiment (module docstring)."""
    U, V = frames(rotated)
    target = U @ np.diag(SINGULAR) @ V.T
    theta0 = {"W1": jnp.asarray(scale * V.T), "W2": jnp.asarray(scale * U)}
    return theta0, {"T": jnp.asarray(target)}


def product(params) -> np.ndarray:
    return np.asarray(params["W2"]) @ np.asarray(params["W1"])


def ode_products(theta0, batch, ts) -> np.ndarray:
    """W2 W1 of the Adam ODE at the times `ts`, (len(ts), 3, 3)."""
    limit = ol.adam(loss)
    args = limit.make_args(batch, c1=C1, c2=C2, eps=EPS)
    traj = ol.solve_limit(limit, theta0, args, ts, rtol=1e-11, atol=1e-13, solver="dopri8", max_steps=2_000_000)
    th = limit.params(traj.ys)
    return np.einsum("kij,kjl->kil", np.asarray(th["W2"]), np.asarray(th["W1"]))


def adam(h):
    return optax.adam(h["lr"], b1=h["b1"], b2=h["b2"], eps=EPS)


def optax_products(theta0, batch, lr: float, saves: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, W2 W1 at those steps) of optax.adam(lr, *adam_betas(lr, c1, c2)) over t = lr * step <= 4."""
    steps = int(round(T_END / lr))
    every = steps // saves
    steps = every * saves
    b1, b2 = ol.adam_betas(lr, C1, C2)
    out = ol.run_optax(loss, theta0, batch, adam, steps, every, hyper={"lr": lr, "b1": b1, "b2": b2})
    P = np.einsum("kij,kjl->kil", np.asarray(out["params"]["W2"]), np.asarray(out["params"]["W1"]))
    return out["steps"], P


def gap(scale: float, lr: float, *, rotated: bool = False, offset: float = 0.0, saves: int = 200) -> float:
    """max over the saved steps k of max |W2 W1 (Adam, step k) - W2 W1 (ODE, t = lr (k + offset))|."""
    theta0, batch = problem(scale, rotated)
    steps, disc = optax_products(theta0, batch, lr, saves)
    ts = lr * (steps + offset)
    cont = ode_products(theta0, batch, ts)
    return float(np.max(np.abs(disc - cont)))


def modified_error(scale: float, ts, *, rotated: bool = False) -> np.ndarray:
    """The leading coefficient e1(t) of the gap predicted by Adam's modified equation, as W2 W1's part
    (len(ts), 3, 3): the optax step is one step of size h = lr of the scheme z <- z + h f_z(theta, z),
    theta <- theta + h f_theta(z_new) (z = (m, v, the two weights); f_theta = -mhat / (sqrt(vhat) + eps)
    depends on theta only through z), whose local error is h^2 f1 with f1 = (1/2) S (Df f), S = +1 on theta
    and -1 on z. The global gap is then h e1(t) + O(h^2), de1/dt = Df e1 + f1, e1(0) = 0."""
    theta0, batch = problem(scale, rotated)
    limit = ol.adam(loss)
    args = limit.make_args(batch, c1=C1, c2=C2, eps=EPS)

    def field(t, state, a):
        y, e = state
        f = lambda z: limit.vector_field(t, z, a)  # noqa: E731
        fy, dff = jax.jvp(f, (y,), (f(y),))
        dfe = jax.jvp(f, (y,), (e,))[1]
        sign = {k: (0.5 if k == "theta" else -0.5) for k in dff}
        f1 = {k: jax.tree_util.tree_map(lambda x, s=sign[k]: s * x, dff[k]) for k in dff}
        return fy, jax.tree_util.tree_map(jnp.add, dfe, f1)

    y0 = limit.initial_state(theta0)
    state0 = (y0, jax.tree_util.tree_map(jnp.zeros_like, y0))
    from flows import solve

    traj = solve(field, state0, t1=float(ts[-1]), ts=ts, args=args, rtol=1e-10, atol=1e-12, solver="dopri8",
                 max_steps=2_000_000)  # fmt: skip
    y, e = traj.ys
    W1, W2, E1, E2 = (np.asarray(x) for x in (y["theta"]["W1"], y["theta"]["W2"], e["theta"]["W1"], e["theta"]["W2"]))
    return np.einsum("kij,kjl->kil", E2, W1) + np.einsum("kij,kjl->kil", W2, E1)


def modified_check(scale: float, lrs, *, rotated: bool = False, saves: int = 200) -> dict:
    """max over t of |(W2 W1 (Adam) - W2 W1 (ODE)) / lr - e1(t)| per lr: O(lr) if the modified equation holds."""
    theta0, batch = problem(scale, rotated)
    rows = []
    for lr in lrs:
        steps, disc = optax_products(theta0, batch, lr, saves)
        ts = lr * steps
        cont = ode_products(theta0, batch, ts)
        e1 = modified_error(scale, ts, rotated=rotated)
        rows.append(
            {
                "lr": lr,
                "gap_over_lr": float(np.max(np.abs(disc - cont)) / lr),
                "e1_max": float(np.max(np.abs(e1))),
                "residual": float(np.max(np.abs((disc - cont) / lr - e1))),
            }  # fmt: skip
        )
    return {"scale": scale, "rotated": rotated, "modified_equation": rows}


def ladder(scale: float, lrs, **kw) -> dict:
    gaps = [gap(scale, lr, **kw) for lr in lrs]
    orders = [float(np.log2(a / b)) for a, b in zip(gaps[:-1], gaps[1:], strict=True)]
    return {"scale": scale, **kw, "lrs": list(lrs), "gaps": gaps, "orders": orders}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scales", type=float, nargs="+", default=[1e-3, 0.1, 0.5])
    p.add_argument("--lrs", type=float, nargs=2, default=[1e-2, 3.2e-5], metavar=("LARGEST", "SMALLEST"))
    p.add_argument("--offsets", type=float, nargs="+", default=[0.0])
    p.add_argument("--rotated", action="store_true", help="a target with random singular frames U, V")
    p.add_argument("--modified", action="store_true", help="compare the gap with the modified equation's e1")
    p.add_argument("--out", type=Path, default=None)
    ns = p.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    n = int(round(np.log2(ns.lrs[0] / ns.lrs[1]))) + 1
    lrs = [ns.lrs[0] / 2**j for j in range(n)]
    rows = []
    if ns.modified:
        for scale in ns.scales:
            row = modified_check(scale, lrs, rotated=ns.rotated)
            row["command"] = " ".join(sys.argv)
            rows.append(row)
            print(json.dumps(row, indent=1), flush=True)
        ns.scales = []
    for scale in ns.scales:
        for offset in ns.offsets:
            row = ladder(scale, lrs, rotated=ns.rotated, offset=offset)
            row["command"] = " ".join(sys.argv)
            rows.append(row)
            print(f"scale {scale:g} offset {offset:g} rotated {ns.rotated}")
            for i, (lr, g) in enumerate(zip(row["lrs"], row["gaps"], strict=True)):
                order = f"  order {row['orders'][i - 1]:.2f}" if i else ""
                print(f"  lr {lr:.3g}  gap {g:.4g}{order}", flush=True)
    if ns.out:  # appended to the rows already there (one file for several ladders)
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        old = json.loads(ns.out.read_text()) if ns.out.exists() else []
        ns.out.write_text(json.dumps(old + rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
