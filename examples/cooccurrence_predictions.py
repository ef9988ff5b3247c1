"""Word co-occurrence: predictions P1-P5 (docs/systems/cooccurrence.md), checked on the exact Gram flow across m.

Yang, Kailkhura, Wang, Liang, NeurIPS 2024 (Thm 3.1, 3.2, F.8, Lemmas 4.4, 4.7, F.6, Def. F.1). For each
width m of a sweep the exact closed Gram ODE (Sec. 3, App. C; it reproduces GD to O(lr), see
tests/cooccurrence) is integrated from the Grams of a random theory-scaled initialisation, and T1 (first zero
training error) is located by an event. Recorded, each with its measured value:

- P1: T1 * S0 roughly constant across m (max/min <= 2 of its means over 12 draws, bootstrap interval);
  attention still near init at T1.
- P2: the I2 and I3 losses first rise, then fall; the I1 and I4 losses fall in phase 1.
- P3: O(1/t) loss in phase 2: t * L̂(t) flat over the last part of the run (max/min <= 1.5) and the
  log-log slope of L̂ near -1.
- P4: phase-2 signs: A[mu2<-mu1], A[mu1<-mu2] increase; A[mu3<-mu1], A[mu3<-mu2] decrease (key<-query);
  M_V[1,2], M_V[1,1], M_V[2,2] increase; M_V[1,3], M_V[2,3] decrease; max |p(mu1->mu2) - 1/L| <= 1/L^2.
- P5: sum_I2 g / sum_I3 g in [1/2, 2] and R(t) in [1, 3] throughout phase 2, R(end) in (1, 2), and the
  Def. F.1 ordering of the group sums of g.

Failures are recorded with their numbers (holds=false), not hidden. Full run (theory-faithful data,
n = 60, L = 5, d = 163, m in {64, 128, 256}, m1 = 256, t up to 300): about 30 s on 2 CPU cores;
`--quick` (n = 12, d = 35, m in {16, 32, 64}, m1 = 32, t up to 100): under a minute; P1 (one draw), P2 and
P5 are not decided at that size (recorded as not tested at this size, with their measured values).
"""

from __future__ import annotations

import logging
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import flows  # noqa: E402
from flows import cooccurrence as co  # noqa: E402
from flows.experiments import plotting, records  # noqa: E402

NAME = "cooccurrence_predictions"


def parse(argv):
    return records.example_parser(NAME, __doc__, seed=0).parse_args(argv)


def setup(quick):
    if quick:
        n, L, m1, ms, t_end = 12, 5, 32, (16, 32, 64), 100.0
    else:
        n, L, m1, ms, t_end = 60, 5, 256, (64, 128, 256), 300.0
    return n, L, 3 + co.num_random_slots(n, L), m1, ms, t_end


# At the quick sizes (n = 12) the I2/I3 bump of P2 is within 1% of flat or absent, and R(t) of P5 stays below 1
# (measured 0.77 .. 1.03 at m = 16, 32, 64); both hold at every width of the full run (n = 60: bump 6-52%, R 1.23
# .. 1.53), so the quick run records them as not tested at this size.
FULL_SIZES = "the full run (n = 60, d = 163, m in {64, 128, 256}, m1 = 256, t up to 300)"
#: below the full run's smallest width the smallest phase-2 score change (about 1e-3) is of the size of the
#: draw's finite-width fluctuation, and its sign changes from seed to seed: P4 is decided from this width up
P4_MIN_M = 64
# P1 compares T1 * S0 across widths. One draw (data and initialisation) moves it by tens of percent, so one
# draw's max/min can land on either side of 2 (at the quick sizes and at the full ones alike): the full run
# decides P1 on the means over P1_DRAWS draws, with a bootstrap interval over the draws; the quick run records
# its one draw, not tested at this size.
P1_DRAWS = 12
P1_SIZES = f"the full run ({P1_DRAWS} draws of the data and initialisation at n = 60, m in {{64, 128, 256}})"


def p1_ratio(products: np.ndarray, n_boot: int = 4000, rng: int = 0) -> tuple[float, float, float]:
    """(r, lo, hi) for `products` (draws, widths) of T1 * S0: r = the largest over the widths of the mean over
    the draws, over the smallest; (lo, hi) its 95% bootstrap interval, whole draws resampled (one draw's data
    are the same at every width)."""
    means = products.mean(axis=0)
    idx = np.random.default_rng(rng).integers(0, len(products), (n_boot, len(products)))
    boot = products[idx].mean(axis=1)
    lo, hi = np.quantile(boot.max(axis=1) / boot.min(axis=1), [0.025, 0.975])
    return float(means.max() / means.min()), float(lo), float(hi)


def check(rec, name, measured, expected, holds, failures, tested_at=None, **extra):
    """Record a prediction; `tested_at`: not decided at this size (its measured value is still recorded)."""
    if tested_at is not None:
        rec.add_prediction(name, measured, expected, None, tested_at=tested_at, **extra)
        return
    rec.add_prediction(name, measured, expected, bool(holds), **extra)
    if not holds:
        failures.append(name)


def analyse(rec, tag, traj, L, failures, quick, m):
    ts = np.asarray(traj.ts)
    o = {k: np.asarray(v) for k, v in traj.observables.items()}
    T1 = float(traj.t_event)
    loss = o["loss"]
    S0 = float(o["S"][0])
    i1 = int(np.searchsorted(ts, T1))  # first saved time >= T1
    phase2 = ts >= T1
    # P1 ingredients
    rec.add_metric(f"{tag}_T1", T1)
    rec.add_metric(f"{tag}_S0", S0)
    rec.add_metric(f"{tag}_loss_at_T1_over_loss0", float(loss[i1] / loss[0]))
    rec.add_metric(f"{tag}_max_abs_dA_at_T1", float(np.max(np.abs(o["A"][i1] - o["A"][0]))))
    rec.add_metric(f"{tag}_max_abs_dp12_at_T1", float(abs(o["p12"][i1] - o["p12"][0])))
    # P2: non-monotone I2 / I3 losses in phase 1
    gl = o["group_loss"]
    rise = gl[: i1 + 1].max(axis=0) / gl[0]
    fall = gl[-1] / gl.max(axis=0)
    p2 = bool(
        rise[1] > 1 and rise[2] > 1 and fall[1] < 1 and fall[2] < 1 and gl[i1, 0] < gl[0, 0] and gl[i1, 3] < gl[0, 3]
    )
    check(
        rec,
        f"P2_{tag}_I2_I3_rise_then_fall",
        {
            "peak_over_initial_I1..I4": rise.tolist(),
            "final_over_peak_I1..I4": fall.tolist(),
            "I1_at_T1_over_initial": float(gl[i1, 0] / gl[0, 0]),
            "I4_at_T1_over_initial": float(gl[i1, 3] / gl[0, 3]),
        },
        "I2, I3 peak/initial > 1 and final/peak < 1; I1, I4 lower at T1 than at 0 (Fig. 1b, Lemma 4.2-4.3)",
        p2,
        failures,
        tested_at=FULL_SIZES if quick else None,
    )
    # P3: t L̂(t) flat in phase 2
    t_end = ts[-1]
    probe = np.array([t_end / 3, 2 * t_end / 3, t_end])
    tl = np.interp(probe, ts, ts * loss)
    spread = float(tl.max() / tl.min())
    late = ts >= t_end / 10
    slope = float(np.polyfit(np.log(ts[late]), np.log(loss[late]), 1)[0])
    check(
        rec,
        f"P3_{tag}_t_times_loss_flat",
        {
            "t": probe.tolist(),
            "t_loss": tl.tolist(),
            "max_over_min": spread,
            "loglog_slope": slope,
            "S_T1": float(o["S"][i1]),
            "S_end": float(o["S"][-1]),
        },
        "t*L(t) max/min <= 1.5 over [t_end/3, t_end] and log-log slope in [-1.3, -0.7] (Thm F.8)",
        spread <= 1.5 and -1.3 <= slope <= -0.7,
        failures,
    )
    # P4: score and value-Gram signs over phase 2, attention near uniform
    dA = o["A"][-1] - o["A"][i1]
    dMV = o["M_V"][-1] - o["M_V"][i1]
    signs = {
        "A[mu2<-mu1]": float(dA[1, 0]),
        "A[mu1<-mu2]": float(dA[0, 1]),
        "A[mu3<-mu1]": float(-dA[2, 0]),
        "A[mu3<-mu2]": float(-dA[2, 1]),
        "M_V[1,2]": float(dMV[0, 1]),
        "M_V[1,1]": float(dMV[0, 0]),
        "M_V[2,2]": float(dMV[1, 1]),
        "M_V[1,3]": float(-dMV[0, 2]),
        "M_V[2,3]": float(-dMV[1, 2]),
    }
    p_dev = float(np.max(np.abs(o["p12"] - 1.0 / L)))
    check(
        rec,
        f"P4_{tag}_phase2_signs",
        {"signed_change (positive = as predicted)": signs, "max_abs_p12_minus_1_over_L": p_dev},
        "every signed change > 0 over [T1, t_end] (Thm 3.2) and max|p(mu1->mu2) - 1/L| <= 1/L^2 (Cor. F.17)",
        all(v > 0 for v in signs.values()) and p_dev <= 1.0 / L**2,
        failures,
        tested_at=FULL_SIZES if quick and m < P4_MIN_M else None,
    )
    # P5: balancing
    br = o["balance_ratio"][phase2]
    R = o["R"][phase2]
    gg = o["group_g"][phase2]
    order = (
        (gg[:, 3] <= np.minimum(gg[:, 1], gg[:, 2]))
        & (np.maximum(gg[:, 1], gg[:, 2]) <= gg[:, 0])
        & (gg[:, 0] <= gg[:, 1] + gg[:, 2] + gg[:, 3])
    )
    check(
        rec,
        f"P5_{tag}_balancing",
        {
            "balance_ratio_min": float(br.min()),
            "balance_ratio_max": float(br.max()),
            "R_min": float(R.min()),
            "R_max": float(R.max()),
            "R_end": float(R[-1]),
            "def_F1_ordering_fraction": float(order.mean()),
        },
        "sum_I2 g/sum_I3 g in [1/2, 2], R in [1, 3] on [T1, t_end], R(t_end) in (1, 2), "
        "Def. F.1 ordering at every saved t >= T1 (Lemmas 4.4, F.6)",
        br.min() >= 0.5 and br.max() <= 2 and R.min() >= 1 and R.max() <= 3 and 1 < R[-1] < 2 and order.all(),
        failures,
        tested_at=FULL_SIZES if quick else None,
    )
    return T1 * S0


P1_EXPECTED = (
    "T1 * S0 roughly constant as m varies: the mean over the draws of T1 * S0 at each width, max/min <= 2 with its "
    "95% bootstrap interval over the draws (Thm 3.1: T1 = C/(sigma1^2 m m1))"
)


def _t1_s0(cfg, ts):
    """T1 * S0 of one draw (the flow from `cfg`'s data and initialisation)."""
    traj = co.solve_flow(cfg, ts)
    return float(traj.t_event) * float(np.asarray(traj.observables["S"])[0])


def main(argv=None) -> int:
    ns = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    n, L, d, m1, ms, t_end = setup(ns.quick)
    config = {
        "n": n,
        "L": L,
        "d": d,
        "m1": m1,
        "m_sweep": list(ms),
        "t_end": t_end,
        "variant": "theory",
        "quick": ns.quick,
    }
    failures: list[str] = []
    with records.RunRecord(ns.out, name=NAME, config=config, seed=ns.seed, quick=ns.quick) as rec:
        ts = flows.log_grid(0.0, t_end, 300, first=1e-7 * t_end)  # early enough to see the I2/I3 bump
        products, trajs = {}, {}
        for m in ms:
            cfg = co.Config(n=n, L=L, d=d, m=m, m1=m1, variant="theory", seed=ns.seed)
            start = time.perf_counter()
            traj = co.solve_flow(cfg, ts)
            rec.add_timing(f"flow_m{m}_s", time.perf_counter() - start)
            rec.add_solver_stats(f"flow_m{m}", traj)
            products[m] = analyse(rec, f"m{m}", traj, L, failures, ns.quick, m)
            trajs[m] = traj
            rec.add_series(**{f"m{m}_{k}": np.asarray(v) for k, v in traj.observables.items()})
        rec.add_series(ts=ts)
        vals = np.array(list(products.values()))
        if ns.quick:  # one draw: recorded, not decided (P1_SIZES)
            measured = {f"m{m}": v for m, v in products.items()} | {"max_over_min": float(vals.max() / vals.min())}
            check(rec, "P1_T1_times_S0_constant_across_m", measured, P1_EXPECTED, None, failures, tested_at=P1_SIZES)
        else:
            draws = [vals]
            for draw in range(1, P1_DRAWS):  # further draws: T1 and S0 only
                seed = ns.seed + draw
                draws.append(
                    [_t1_s0(co.Config(n=n, L=L, d=d, m=m, m1=m1, variant="theory", seed=seed), ts) for m in ms]
                )
            products_all = np.array(draws)
            r, lo, hi = p1_ratio(products_all)
            rec.add_series(P1_T1_times_S0=products_all)
            measured = {f"m{m}_mean": float(v) for m, v in zip(ms, products_all.mean(axis=0), strict=True)}
            measured |= {"max_over_min": r, "ci95": [lo, hi], "draws": P1_DRAWS}
            check(rec, "P1_T1_times_S0_constant_across_m", measured, P1_EXPECTED, hi <= 2.0, failures)

        fig, axes = plotting.figure(1, 3, width=14.0, height=4.0)
        for m, c in zip(ms, plotting.colors(len(ms)), strict=True):
            o = trajs[m].observables
            t = ts[1:]  # log axes: leave out t = 0
            loss = np.asarray(o["loss"])[1:]
            axes[0].loglog(t, loss, color=c, label=f"m={m}")
            axes[0].loglog(t, t * loss, color=c, ls="--")
            axes[1].plot(t * float(np.asarray(o["S"])[0]), np.asarray(o["train_error"])[1:], color=c, label=f"m={m}")
            axes[2].plot(t, np.asarray(o["group_loss"])[1:, 1], color=c, label=f"I2, m={m}")
            axes[2].plot(t, np.asarray(o["group_loss"])[1:, 2], color=c, ls=":")
        plotting.log_time_axis(axes[0])
        axes[0].set_ylabel(r"$\hat L(t)$ (solid), $t \hat L(t)$ (dashed)")
        axes[0].set_title("P3: loss ~ 1/t in phase 2 (t * loss flat)", fontsize=9)
        axes[1].set_xscale("log")
        axes[1].set_xlabel("t * S0")
        axes[1].set_ylabel("training error")
        axes[1].set_title("P1: end of phase 1 collapses in t * S0", fontsize=9)
        plotting.log_time_axis(axes[2])
        axes[2].set_ylabel("group loss")
        axes[2].set_title("P2: I2 (solid), I3 (dotted) losses rise, then fall", fontsize=9)
        for ax in axes:
            ax.legend(fontsize=7)
        rec.save_figure(fig, "predictions.png")
    for name, pred in rec.predictions.items():
        logging.info("%s %s: measured %s", records.verdict_tag(pred), name, pred["measured"])
    if failures:
        logging.info("failed predictions: %s", ", ".join(failures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
