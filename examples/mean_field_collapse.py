"""Mean-field transformer, P3: training curves collapse under the M L time scale, and do not with one raw step.

Gao et al., NeurIPS 2024 (Thm 3.1; docs/systems/mean_field.md, P3): GD with learning rate eta = eta_tau M L on the raw
gradients of Q moves every particle by eta_tau times its mean-field velocity, so the risk curves R(tau) of
networks of any depth L and width M, read at tau = k eta_tau, follow one limit curve as L, M grow. With one
raw learning rate for every (L, M), a network's flow time per step is eta / (M L): the curves, read at the
same step counts, spread out with M L.

Runs: a grid of (L, M), each with several seeds in one vmapped program (`sweep.train_gd_seeds`), once with
eta = eta_tau M L and once with the raw eta = eta_tau M0 L0 of the grid's middle network; the limit curve is
approximated by the seed mean of a larger network (L_ref = 2 max L, M_ref = 2 max M, same eta_tau). The
area between the seed-mean curve of each (L, M) and the limit curve, relative to the area under the limit
curve, is recorded against L and M.

Predictions: (1) under the M L scale the area falls as the network grows (largest vs smallest network of
the grid); (2) the raw step spreads the curves: the median raw-step area exceeds the median scaled area by
a factor >= 3. `--quick`: L in {2, 4}, M in {4, 16}, 3 seeds, tau up to 20 (about 40 s on 2 CPU cores);
full: L in {2, 4, 8}, M in {4, 16, 64}, 5 seeds, tau up to 40 (about 10 minutes).
"""

from __future__ import annotations

import logging

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from flows import mean_field as mf  # noqa: E402
from flows.experiments import plotting, records  # noqa: E402
from flows.mean_field.sweep import train_gd_seeds  # noqa: E402

NAME = "mean_field_collapse"
ETA_TAU, TAU_END, SAVES = 0.2, 40.0, 20


def sizes(quick):
    """(depths, widths, seeds, tau_end)."""
    if quick:
        return (2, 4), (4, 16), 3, 20.0
    return (2, 4, 8), (4, 16, 64), 5, TAU_END


def _area(curve, limit, tau):
    return float(np.trapezoid(np.abs(curve - limit), tau) / np.trapezoid(limit, tau))


def main(argv=None) -> int:
    ns = records.example_parser(NAME, __doc__, seed=0, seed_help="first seed of each batch").parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    log = logging.getLogger(NAME)
    Ls, Ms, num_seeds, tau_end = sizes(ns.quick)
    seeds = list(range(ns.seed, ns.seed + num_seeds))
    base = mf.Config(d=3, D=4, N=8, L=Ls[0], M=Ms[0], n_train=32, n_test=128, lam=1e-3, init_scale=2.0)
    steps = round(tau_end / ETA_TAU)
    L0, M0 = Ls[len(Ls) // 2], Ms[len(Ms) // 2]
    eta_raw = ETA_TAU * M0 * L0
    L_ref, M_ref = 2 * max(Ls), 2 * max(Ms)
    config = {
        "L": list(Ls),
        "M": list(Ms),
        "seeds": seeds,
        "eta_tau": ETA_TAU,
        "eta_raw": eta_raw,
        "raw_reference": [L0, M0],
        "limit_proxy": [L_ref, M_ref],
        "tau_end": tau_end,
        "d": base.d,
        "D": base.D,
        "N": base.N,
        "n_train": base.n_train,
        "lam": base.lam,
        "init_scale": base.init_scale,
        "quick": ns.quick,
    }
    with records.RunRecord(ns.out, name=NAME, config=config, seed=ns.seed, quick=ns.quick) as rec:
        ref = train_gd_seeds(base.replace(L=L_ref, M=M_ref), ETA_TAU, steps, seeds, save_every=steps // SAVES)
        tau = ref.tau
        limit = ref["R"].mean(axis=0)
        log.info("limit proxy L=%d M=%d: compile %.1f s, run %.1f s", L_ref, M_ref, ref.compile_s, ref.run_s)
        scaled, raw, area_s, area_r = {}, {}, {}, {}
        for L in Ls:
            for M in Ms:
                cfg = base.replace(L=L, M=M)
                s = train_gd_seeds(cfg, ETA_TAU, steps, seeds, save_every=steps // SAVES)
                r = train_gd_seeds(cfg, eta_raw / (M * L), steps, seeds, save_every=steps // SAVES)
                scaled[L, M], raw[L, M] = s["R"], r["R"]  # both read at tau = k eta_tau (nominal)
                area_s[L, M] = _area(s["R"].mean(axis=0), limit, tau)
                area_r[L, M] = _area(r["R"].mean(axis=0), limit, tau)
                rec.add_metric(f"area_scaled_L{L}_M{M}", area_s[L, M])
                rec.add_metric(f"area_raw_L{L}_M{M}", area_r[L, M])
                log.info("L=%d M=%d: area scaled %.3g, raw %.3g", L, M, area_s[L, M], area_r[L, M])
        small, large = (Ls[0], Ms[0]), (Ls[-1], Ms[-1])
        rec.add_prediction(
            "scaled_area_largest_over_smallest",
            area_s[large] / area_s[small],
            "< 1: under eta = eta_tau M L the curves approach the limit curve as L and M grow (P3)",
            area_s[large] < area_s[small],
        )
        med_s, med_r = float(np.median(list(area_s.values()))), float(np.median(list(area_r.values())))
        rec.add_prediction(
            "median_area_raw_over_scaled",
            med_r / med_s,
            ">= 3: with one raw learning rate the curves do not collapse (P3)",
            med_r >= 3 * med_s,
        )
        rec.add_series(
            tau=tau,
            limit_R=limit,
            limit_R_seeds=ref["R"],
            **{f"scaled_R_L{L}_M{M}": v for (L, M), v in scaled.items()},
            **{f"raw_R_L{L}_M{M}": v for (L, M), v in raw.items()},
        )

        fig, axes = plotting.figure(1, 3, width=15.0, height=4.2)
        colors = plotting.colors(len(scaled))
        for ax, curves, title in (
            (axes[0], scaled, r"$\eta = \eta_\tau M L$ (collapse)"),
            (axes[1], raw, rf"one raw $\eta = {eta_raw:g}$ (no collapse)"),
        ):
            for ((L, M), R), c in zip(curves.items(), colors, strict=True):
                ax.plot(tau, R.mean(axis=0), color=c, lw=1.5, label=f"L={L}, M={M}")
                ax.fill_between(tau, R.min(axis=0), R.max(axis=0), color=c, alpha=0.15, lw=0)
            ax.plot(tau, limit, "k--", lw=1.5, label=f"limit proxy (L={L_ref}, M={M_ref})")
            ax.set_yscale("log")
            ax.set_xlabel(r"$\tau = k\,\eta_\tau$")
            ax.set_ylabel("risk R (seed mean, band: min-max)")
            ax.set_title(title, fontsize=9)
            ax.legend(fontsize=7)
        ax = axes[2]
        for L, marker in zip(Ls, "osd^v", strict=False):
            ax.plot(Ms, [area_s[L, M] for M in Ms], marker=marker, label=f"scaled, L={L}")
            ax.plot(Ms, [area_r[L, M] for M in Ms], marker=marker, ls=":", label=f"raw, L={L}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("M")
        ax.set_ylabel("area between curve and limit / area under limit")
        ax.set_title("distance to the limit curve", fontsize=9)
        ax.legend(fontsize=7)
        rec.save_figure(fig, "collapse.png")
    records.log_predictions(rec, log)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
