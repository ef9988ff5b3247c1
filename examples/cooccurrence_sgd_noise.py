"""Word co-occurrence under SGD noise: the spread of T1 and of the loss, SGD SDE paths against SGD runs.

Yang, Kailkhura, Wang, Liang, "Word co-occurrence via gradient flow", NeurIPS 2024, analyse full-batch gradient
flow; their phase boundary T1 is the first time of zero training error. Minibatch SGD (`optax.sgd(lr)`, batches
of B distinct samples, t = lr * step) spreads T1 and the loss over seeds; its diffusion limit (issue 12,
`flows.cooccurrence.noise`) is the SDE d theta = -grad L dt + sqrt(lr c / B) G dW, c = (n - B) / (n - 1), on the
parameters. Here the SDE's paths (Euler-Maruyama, dt = lr / 4) and the SGD runs (one vmapped program, the
batches drawn as `train` draws them) are compared at each lr: mean and variance of T1 (first upcrossing of 0 by
min_i y_i F_i, linearly interpolated on the 41 saved times, the same way for every path, run and the gradient
flow) and of the loss at t = 0.5, each within 3 standard errors; and the spread's sqrt(lr) law.

A small network (n = 12, L = 3, d = 4, m = m1 = 4, theory init, seed 0; P = 64 parameters), B = 3, horizon
t = 0.5 (the gradient flow's loss falls from 1.18 to 0.20, T1 = 0.26). --quick: lr = 0.0125, 256 paths and
runs; full: lr = 0.0125 and 0.003125, 512 each. Full run about 1.5 min on 2 cores, --quick about 1 min (mostly
the compiles of the flow, the SDE and the SGD programs).
"""

from __future__ import annotations

import logging
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from flows import cooccurrence as co  # noqa: E402
from flows.cooccurrence import noise as con  # noqa: E402
from flows.experiments import findings, plotting, records  # noqa: E402

NAME = "cooccurrence_sgd_noise"
SHAPE = dict(n=12, L=3, d=4, m=4, m1=4)
B, T, N_SAVES = 3, 0.5, 40
NUM_TEST = 12  # test draws of the test_loss observable
Z_TOL = 3.0  # standard errors
SQRT_RANGE = (1.5, 2.7)  # std(lr) / std(lr / 4): sqrt(4) = 2


def _z_mean(a, b):
    return float((a.mean() - b.mean()) / np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size))


def _se_var(a):
    d = a - a.mean()
    return float(np.sqrt((np.mean(d**4) - np.mean(d**2) ** 2) / a.size))


def _z_var(a, b):
    return float((a.var(ddof=1) - b.var(ddof=1)) / np.hypot(_se_var(a), _se_var(b)))


def first_crossing(ts, margin):
    """T1 of each row of `margin` (R, len(ts)): the first upcrossing of 0, linearly interpolated between
    saved times (0 if already > 0 at ts[0], nan if never)."""
    margin = np.atleast_2d(margin)
    out = np.full(margin.shape[0], np.nan)
    for r, row in enumerate(margin):
        above = np.flatnonzero(row > 0)
        if above.size == 0:
            continue
        i = above[0]
        out[r] = ts[0] if i == 0 else ts[i - 1] + (ts[i] - ts[i - 1]) * (-row[i - 1]) / (row[i] - row[i - 1])
    return out


def main(argv=None) -> int:
    ns = records.example_parser(
        NAME, __doc__, seed=0, seed_help="seed of the Brownian paths (SGD runs: seed + 1)"
    ).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    lrs = (0.0125,) if ns.quick else (0.0125, 0.003125)
    paths = 256 if ns.quick else 512
    cfg = co.Config(**SHAPE, variant="paper", init="theory", seed=0)
    ts = np.linspace(0.0, T, N_SAVES + 1)
    max_steps = int(round(T / (min(lrs) / 4))) + 1  # one SDE program for every lr
    config = {
        **SHAPE,
        "variant": "paper",
        "init": "theory",
        "batch_size": B,
        "T": T,
        "lrs": list(lrs),
        "paths": paths,
        "dt": "lr / 4",
        "saves": N_SAVES + 1,
        "quick": ns.quick,
    }
    with records.RunRecord(ns.out, name=NAME, config=config, seed=ns.seed, quick=ns.quick) as rec:
        start = time.perf_counter()
        flow = co.solve_flow(cfg, ts, num_test=NUM_TEST)
        rec.add_timing("flow_s", time.perf_counter() - start)
        rec.add_solver_stats("flow", flow)
        flow_loss = np.asarray(flow.observables["loss"])
        T1_flow = float(first_crossing(ts, np.asarray(flow.observables["min_margin"])[None])[0])
        rec.add_metric("T1_flow_event", float(flow.t_event))
        rec.add_metric("T1_flow_grid", T1_flow)
        rec.add_series(ts=ts, flow_loss=flow_loss, flow_min_margin=np.asarray(flow.observables["min_margin"]))
        res = {}
        for lr in lrs:
            start = time.perf_counter()
            sde = con.solve_sgd_sde(cfg, ts, B, lr, paths, seed=ns.seed, num_test=NUM_TEST, max_steps=max_steps)
            rec.add_timing(f"sde_lr{lr:g}_s", time.perf_counter() - start)
            if not all(s == "ok" for s in sde.status):
                raise RuntimeError(f"SDE paths failed at lr {lr}: {sorted(set(sde.status))}")
            steps = int(round(T / lr))
            start = time.perf_counter()
            sgd = con.train_sgd_runs(
                cfg, steps, B, lr, num_runs=paths, seed=ns.seed + 1, save_every=steps // N_SAVES, num_test=NUM_TEST
            )
            rec.add_timing(f"sgd_lr{lr:g}_s", time.perf_counter() - start)
            if not np.allclose(sgd["ts"], ts, rtol=0, atol=1e-12):
                raise RuntimeError("the SGD save times are not the SDE's")
            r = {}
            for who, o in (("sde", sde.observables), ("sgd", sgd)):
                loss = np.asarray(o["loss"])
                r[who] = {"loss": loss, "T1": first_crossing(ts, np.asarray(o["min_margin"]))}
                rec.add_series(**{f"{who}_lr{lr:g}_loss": loss, f"{who}_lr{lr:g}_T1": r[who]["T1"]})
            res[lr] = r
            for what, pick in (("T1", lambda x: x["T1"]), ("loss", lambda x: x["loss"][:, -1])):
                a, b = pick(r["sde"]), pick(r["sgd"])
                if np.isnan(a).any() or np.isnan(b).any():
                    raise RuntimeError(f"a path or run has no T1 before t = {T} at lr {lr}")
                tag = f"{what}_lr{lr:g}"
                rec.add_metric(f"{tag}_sde_mean", float(a.mean()))
                rec.add_metric(f"{tag}_sgd_mean", float(b.mean()))
                rec.add_metric(f"{tag}_sde_std", float(a.std(ddof=1)))
                rec.add_metric(f"{tag}_sgd_std", float(b.std(ddof=1)))
                zm, zv = _z_mean(a, b), _z_var(a, b)
                at = "T1" if what == "T1" else f"the loss at t = {T:g}"
                for moment, z in (("mean", zm), ("variance", zv)):
                    name = f"{tag}_{moment}_sde_matches_sgd"
                    rec.add_prediction(
                        name,
                        z,
                        f"|z| < {Z_TOL:g}: the {moment} of {at} over {paths} SDE paths "
                        f"and {paths} SGD runs agree within {Z_TOL:g} standard errors of their "
                        f"difference",
                        bool(abs(z) < Z_TOL),
                        known_finding=findings.known(NAME, name),
                        tolerance=Z_TOL,
                        sde=float(a.mean() if moment == "mean" else a.var(ddof=1)),
                        sgd=float(b.mean() if moment == "mean" else b.var(ddof=1)),
                    )
            rec.add_metric(f"T1_lr{lr:g}_mean_shift_sgd_vs_flow", float(r["sgd"]["T1"].mean() - T1_flow))
        lo, hi = SQRT_RANGE
        for what, pick in (("T1", lambda x: x["T1"]), ("loss", lambda x: x["loss"][:, -1])):
            name = f"{what}_spread_scales_as_sqrt_lr"
            expected = (
                f"std at lr {max(lrs):g} / std at lr {max(lrs) / 4:g} in [{lo:g}, {hi:g}] for the SDE and "
                f"for SGD (sqrt(4) = 2: the noise is sqrt(lr))"
            )
            known = findings.known(NAME, name)
            if len(lrs) < 2:
                rec.add_prediction(
                    name,
                    float("nan"),
                    expected,
                    None,
                    tested_at="the full run (two learning rates)",
                    known_finding=known,
                )
                continue
            ratios = {
                who: float(pick(res[lrs[0]][who]).std(ddof=1) / pick(res[lrs[1]][who]).std(ddof=1))
                for who in ("sde", "sgd")
            }
            rec.add_prediction(
                name,
                ratios["sde"],
                expected,
                bool(all(lo <= v <= hi for v in ratios.values())),
                known_finding=known,
                sgd=ratios["sgd"],
            )
        plot(rec, ts, flow_loss, T1_flow, res, paths)
    records.log_predictions(rec, logging.getLogger(NAME))
    return 0


def plot(rec, ts, flow_loss, T1_flow, res, paths):
    fig, axes = plotting.figure(1, 3, width=15.0, height=4.6, squeeze=False)
    ax_l, ax_h, ax_s = axes[0]
    ax_l.plot(ts, flow_loss, "k-", label="gradient flow")
    for k, (lr, r) in enumerate(res.items()):
        color = f"C{k}"
        m, s = r["sde"]["loss"].mean(axis=0), r["sde"]["loss"].std(axis=0, ddof=1)
        ax_l.fill_between(ts, m - s, m + s, color=color, alpha=0.25, label=f"SDE mean +- std, lr {lr:g}")
        m, s = r["sgd"]["loss"].mean(axis=0), r["sgd"]["loss"].std(axis=0, ddof=1)
        ax_l.errorbar(
            ts[::4],
            m[::4],
            yerr=s[::4],
            fmt="o",
            color=color,
            markersize=3,
            capsize=2,
            label=f"SGD mean +- std, lr {lr:g}",
        )
        bins = np.linspace(
            min(r["sde"]["T1"].min(), r["sgd"]["T1"].min()), max(r["sde"]["T1"].max(), r["sgd"]["T1"].max()), 30
        )
        ax_h.hist(r["sde"]["T1"], bins=bins, color=color, alpha=0.35, label=f"SDE, lr {lr:g}")
        ax_h.hist(r["sgd"]["T1"], bins=bins, color=color, histtype="step", linewidth=1.5, label=f"SGD, lr {lr:g}")
    plotting.annotate_vline(ax_h, T1_flow, "T1 of the gradient flow")
    ax_l.set_yscale("log")
    ax_l.set(xlabel="t = lr * step", ylabel="training loss", title=f"loss over {paths} paths / runs")
    ax_h.set(xlabel="T1 (first zero training error)", ylabel="count", title="T1 over paths (filled) and runs (line)")
    lrs = np.array(list(res))
    for who, mark in (("sde", "-o"), ("sgd", "--s")):
        for what, color in (("T1", "C3"), ("loss", "C4")):
            pick = (lambda x: x["T1"]) if what == "T1" else (lambda x: x["loss"][:, -1])
            ax_s.plot(
                lrs,
                [pick(res[lr][who]).std(ddof=1) for lr in lrs],
                mark,
                color=color,
                label=f"std of {what} ({who.upper()})",
            )
    if len(lrs) > 1:
        ref = np.array([res[lrs[0]]["sgd"]["T1"].std(ddof=1)]) * np.sqrt(lrs / lrs[0])
        ax_s.plot(lrs, ref, "k:", label="sqrt(lr)")
    ax_s.set_xscale("log")
    ax_s.set_yscale("log")
    ax_s.set(xlabel="lr", ylabel="std over paths / runs", title=f"spread at t = {T:g} (loss) and of T1")
    for ax in axes[0]:
        ax.legend(fontsize=7)
    fig.suptitle("Word co-occurrence (n = 12, B = 3): SGD SDE paths vs minibatch SGD runs")
    rec.save_figure(fig, "cooccurrence_sgd_noise.png")


if __name__ == "__main__":
    raise SystemExit(main())
