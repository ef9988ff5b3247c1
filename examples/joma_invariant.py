"""JoMA, Fig. 2/3: the attention logits follow the MLP weights (the invariant), exactly for exp attention.

Tian, Wang, Zhang, Chen, Du, ICLR 2024 (arXiv:2310.00535), with the data and the run of the official script
`draw_figure_2_3.py` (`flows.joma.Config()`: 10 distinct and 10 common tokens, 20 classes, tau = 0.5, W and z
~ N(0, 1e-4); full-batch GD at lr 0.1 for 2000 steps, t = lr * step up to 200), trained on the shared driver
(`flows.joma.train`) beside its gradient flow (`flows.joma.solve_flow`). Predictions:

- J1 (Fig. 2): softmax attention, linear MLP: the normalised correlation NC(z, z_hat) between the logits and
  their estimate from V (Theorem 1's softmax form, the official C at the start) stays above 0.95 along the
  whole run, and the gradient flow from the same start draws the same curve (within 1e-3). The least-squares
  slope of z on z_hat is recorded beside it (the paper claims the correlation, not the magnitude, which drifts
  once the attention is sparse).
- J2 (Fig. 3, nonlinear MLPs): the same correlation stays above 0.95 with a ReLU and with a SiLU MLP.
- J3: exp attention: the invariant z - sum_k v_k^2 / (2 tau) is exact along the joint gradient flow (its largest
  gap below 1e-8 up to t = 20; `flows.compare`'s prediction of the spec).
- J4: along GD at lr = 0.1, 0.05, 0.025 (to t = 20) the invariant's gap is first order in lr: the fitted order's
  interval, widened by 0.1, contains 1 (`flows.compare`).
- J5 (Fig. 3, the V column of class 0 after the official run): the largest entry of v_0 sits on one of the
  class's two most frequent tokens (distinct tokens 0, 1), and every common token's |v| is below a quarter of
  it (distinct tokens large, common tokens small).
- J6: exp attention: the flow of W alone (the invariant substituted, the spec's named limit "w_flow") is the
  joint flow: the largest difference of W up to t = 20 below 1e-8 of W's motion.

The ReLU network has no flow drawn beside it: its gradient flow is non-smooth where pre-activations cross 0 and
the adaptive solver stalls there (a Filippov sliding mode), so J2 is a statement about the network only.

Full run and `--quick`: the same sizes (the official run is cheap); the full run adds the SiLU flow and a fourth
learning rate to J4. About 20 s of CPU for `--quick`, most of it compiling.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import flows  # noqa: E402
from flows import joma  # noqa: E402
from flows.experiments import plotting, records  # noqa: E402

NAME = "joma_invariant"
GALLERY = Path(__file__).resolve().parent.parent / "docs" / "gallery" / f"{NAME}.png"
LR, STEPS, SAVE_EVERY = 0.1, 2000, 20
CORR_MIN, CORR_FLOW_GAP = 0.95, 1e-3
T_EXP, COMMON_FRACTION, W_FLOW_TOL = 20.0, 0.25, 1e-8
MLPS = ("linear", "relu", "silu")


def sizes(quick):
    if quick:
        return dict(lrs=(0.1, 0.05, 0.025), flows=("linear",))
    return dict(lrs=(0.1, 0.05, 0.025, 0.0125), flows=("linear", "silu"))


def check(rec, failures, name, measured, expected, holds):
    rec.add_prediction(name, measured, expected, bool(holds))
    if not holds:
        failures.append(name)


def main(argv=None) -> int:
    ns = records.example_parser(NAME, __doc__, seed=0).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sz = sizes(ns.quick)
    failures: list[str] = []
    base = joma.Config(seed=ns.seed)
    meta = {"config": str(base), "lr": LR, "steps": STEPS, "t_exp": T_EXP, **sz}
    with records.RunRecord(ns.out, name=NAME, config=meta, seed=ns.seed, quick=ns.quick) as rec:
        # J1, J2: the official run with each MLP, the gradient flow beside the smooth ones
        nets, fls = {}, {}
        for mlp in MLPS:
            start = time.perf_counter()
            nets[mlp] = joma.train(base.replace(mlp=mlp), "gd", LR, STEPS, save_every=SAVE_EVERY)
            rec.add_timing(f"train_{mlp}_s", time.perf_counter() - start)
        for mlp in sz["flows"]:
            start = time.perf_counter()
            fls[mlp] = joma.solve_flow(base.replace(mlp=mlp), nets[mlp].ts)
            rec.add_timing(f"flow_{mlp}_s", time.perf_counter() - start)
            rec.add_solver_stats(f"flow_{mlp}", fls[mlp])
        corr = {m: np.asarray(nets[m]["z_estimate_corr"]) for m in MLPS}
        slope = {m: np.asarray(nets[m]["z_estimate_slope"]) for m in MLPS}
        flow_gap = {m: float(np.max(np.abs(corr[m] - np.asarray(fls[m].observables["z_estimate_corr"])))) for m in fls}
        check(
            rec,
            failures,
            "J1_softmax_linear_mlp_correlation",
            {
                "min_corr": float(corr["linear"].min()),
                "final_corr": float(corr["linear"][-1]),
                "max_gap_to_flow": flow_gap["linear"],
                "final_slope": float(slope["linear"][-1]),
            },
            f"NC(z, z_hat) >= {CORR_MIN} at every saved step to t = {LR * STEPS:g}; the flow's within "
            f"{CORR_FLOW_GAP:g}",
            corr["linear"].min() >= CORR_MIN and flow_gap["linear"] < CORR_FLOW_GAP,
        )
        check(
            rec,
            failures,
            "J2_nonlinear_mlp_correlation",
            {m: {"min_corr": float(corr[m].min()), "final_slope": float(slope[m][-1])} for m in ("relu", "silu")},
            f"NC(z, z_hat) >= {CORR_MIN} at every saved step with a ReLU and with a SiLU MLP",
            min(corr["relu"].min(), corr["silu"].min()) >= CORR_MIN,
        )
        for m in fls:
            rec.add_metric(f"corr_gap_network_flow_{m}", flow_gap[m])
        # J3, J4: exp attention, the driver's flow and GD at several rates (flows.compare)
        exp_system = joma.system(base.replace(attention="exp"))
        start = time.perf_counter()
        cmp = flows.compare(
            exp_system, lrs=sz["lrs"], t_end=T_EXP, saves=20, observables=("invariant_gap", "loss"), tolerance=0.1
        )
        rec.add_timing("compare_exp_s", time.perf_counter() - start)
        rec.add_solver_stats("flow_exp", cmp.flow)
        pred = cmp.predictions["invariant_exact_along_flow"]
        check(rec, failures, "J3_exp_invariant_exact_along_flow", pred["measured"], pred["expected"], pred["holds"])
        fit = cmp.orders["invariant_gap"]
        check(
            rec,
            failures,
            "J4_exp_invariant_gap_first_order_in_lr",
            {
                "order": fit.slope,
                "interval": list(fit.slope_ci),
                "gaps": dict(zip(map(str, cmp.lrs), map(float, cmp.gaps["invariant_gap"]), strict=True)),
            },
            "max_t |I(t) - I(0)| along GD ~ C lr: the order's interval, widened by 0.1, contains 1",
            cmp.verdicts["invariant_gap"],
        )
        rec.add_metric("exp_loss_gap_order", cmp.orders["loss"].slope)
        # J5: the V column of class 0 after the official run (linear MLP)
        V = np.asarray(joma.model.contextual_weights(nets["linear"].params, joma.population(base)))
        X = np.asarray(joma.frequencies(base))
        v0, top = V[:, 0], np.argsort(X[: base.n_distinct, 0])[::-1][:2]
        common = float(np.max(np.abs(v0[base.n_distinct :])))
        check(
            rec,
            failures,
            "J5_v_column_distinct_large_common_small",
            {"argmax": int(np.argmax(v0)), "max": float(v0.max()), "top_tokens": top.tolist(), "common_max": common},
            f"argmax_l v_0[l] is one of class 0's two most frequent tokens, and max_common |v_0| < "
            f"{COMMON_FRACTION:g} max v_0",
            int(np.argmax(v0)) in top and common < COMMON_FRACTION * v0.max(),
        )
        # J6: the named limit "w_flow" against the joint flow
        start = time.perf_counter()
        red = flows.solve_flow(exp_system, np.asarray(cmp.flow.ts), reduced="w_flow")
        rec.add_timing("w_flow_s", time.perf_counter() - start)
        rec.add_solver_stats("w_flow", red)
        W = np.asarray(cmp.flow.ys["W"])
        motion = float(np.max(np.abs(W - W[0])))
        diff = float(np.max(np.abs(np.asarray(red.ys) - W)))
        check(
            rec,
            failures,
            "J6_w_flow_is_the_joint_flow",
            {"max_abs_W_diff": diff, "W_motion": motion, "relative": diff / motion},
            f"max_t |W_reduced - W_joint| < {W_FLOW_TOL:g} max_t |W(t) - W(0)| (exp attention, t <= {T_EXP:g})",
            diff < W_FLOW_TOL * motion,
        )
        rec.add_series(
            ts=nets["linear"].ts,
            **{f"corr_{m}": corr[m] for m in MLPS},
            **{f"slope_{m}": slope[m] for m in MLPS},
            **{f"flow_corr_{m}": np.asarray(fls[m].observables["z_estimate_corr"]) for m in fls},
            flow_V=np.asarray(fls["linear"].ys["W"])[:, : base.n_tokens, 0],
            V_end=V,
            exp_lrs=cmp.lrs,
            exp_gaps=cmp.gaps["invariant_gap"],
            exp_flow_ts=np.asarray(cmp.flow.ts),
            exp_flow_gap=np.asarray(cmp.flow.observables["invariant_gap"]),
        )
        path = _figure(rec, base, nets, fls, corr, slope, cmp, V, X)
        if not ns.quick:
            shutil.copyfile(path, GALLERY)
    records.log_predictions(rec)
    if failures:
        logging.info("failed predictions: %s", ", ".join(failures))
    return 0


def _figure(rec, base, nets, fls, corr, slope, cmp, V, X):
    fig, axes = plotting.figure(2, 3, width=15.0, height=8.0)
    ax = axes[0, 0]
    ts = nets["linear"].ts
    for m, c in zip(MLPS, ("C0", "C1", "C2"), strict=True):
        ax.plot(ts, corr[m], color=c, lw=1.5, label=f"GD, {m} MLP")
        if m in fls:
            label = "flow" if m == "linear" else None
            ax.plot(fls[m].ts, fls[m].observables["z_estimate_corr"], "k--", lw=0.8, label=label)
    ax.axhline(CORR_MIN, color="gray", ls=":", lw=0.8)
    ax.set_xlabel("t = lr step")
    ax.set_ylabel("NC(z, z_hat)")
    ax.set_title("J1, J2: softmax attention, the correlation", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for m, c in zip(MLPS, ("C0", "C1", "C2"), strict=True):
        ax.plot(ts, slope[m], color=c, lw=1.5, label=m)
    ax.axhline(1.0, color="gray", ls=":", lw=0.8)
    ax.set_xlabel("t")
    ax.set_ylabel("slope of z on z_hat")
    ax.set_title("the magnitude drifts (recorded, not claimed)", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[0, 2]
    flow_V = np.asarray(fls["linear"].ys["W"])[:, :, 0]
    for i, c in zip(range(4), plotting.colors(4), strict=True):
        ax.plot(fls["linear"].ts, flow_V[:, i], color=c, lw=1.2, label=f"token {i}")
        ax.plot([ts[-1]], [V[i, 0]], "o", color=c, ms=5)
    ax.axhline(0.0, color="k", ls=":", lw=0.6)
    ax.set_xlabel("t")
    ax.set_ylabel("v_0[l]")
    ax.set_title("v_0 along the flow (lines) and GD's end (dots)", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1, 0]
    palette = plotting.colors(len(cmp.lrs))
    for r, c, lr in zip(cmp.records, palette, cmp.lrs, strict=True):
        ax.semilogy(r.ts[1:], np.asarray(r["invariant_gap"])[1:], color=c, lw=1.2, label=f"GD lr = {lr:g}")
    flow_gap = np.asarray(cmp.flow.observables["invariant_gap"])
    ax.semilogy(np.asarray(cmp.flow.ts)[1:], np.maximum(flow_gap[1:], 1e-17), "k--", lw=1, label="flow")
    ax.set_xlabel("t")
    ax.set_ylabel("max_l |I_l(t) - I_l(0)|")
    ax.set_title("J3: exp attention, the invariant", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1, 1]
    fit = cmp.orders["invariant_gap"]
    ax.loglog(cmp.lrs, cmp.gaps["invariant_gap"], "o-", ms=5, label="max_t gap")
    ax.loglog(cmp.lrs, fit.predict(cmp.lrs), ":", color="k", label=f"order {fit.slope:.3f}")
    ax.set_xticks(cmp.lrs, [f"{lr:g}" for lr in cmp.lrs], minor=False)
    ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    ax.set_xlabel("lr")
    ax.set_ylabel("invariant gap along GD")
    ax.set_title("J4: first order in lr", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1, 2]
    n_d = base.n_distinct
    colors = ["C0"] * n_d + ["0.6"] * (base.n_tokens - n_d)
    ax.bar(np.arange(base.n_tokens), V[:, 0], color=colors)
    ax2 = ax.twinx()
    ax2.plot(np.arange(base.n_tokens), X[:, 0], "k.", ms=4)
    ax2.set_ylabel("x_0 (dots)")
    ax.set_xlabel("contextual token l (blue: distinct, grey: common)")
    ax.set_ylabel("v_0[l] after training")
    ax.set_title("J5: the V column of class 0", fontsize=9)
    fig.suptitle("JoMA: the logits follow the MLP weights (Fig. 2/3)", fontsize=10)
    return rec.save_figure(fig, "invariant.png")


if __name__ == "__main__":
    raise SystemExit(main())
