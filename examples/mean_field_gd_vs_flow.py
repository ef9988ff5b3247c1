"""Mean-field transformer: GD on the finite network at three step sizes against the particle Wasserstein flow.

Gao et al., "Global convergence in training large-scale transformers", NeurIPS 2024 (eqs. 2.1-2.4,
Thm 3.1): GD with learning rate eta = eta_tau M L (attention) and eta_tau M_mlp L (MLP) on the raw gradients of
Q is explicit Euler of the particle flow d theta/d tau = -M L dQ/d theta with step eta_tau, so its curves,
read at tau = k eta_tau, approach the adaptive solve of the flow at first order in eta_tau. In-context
linear regression (d = 3, D = 4, N = 8, HuberizedReLU threshold 1, weight decay lam = 1e-3, i.i.d.
uniform initial law); the flow is integrated by `flows.solve` (Tsit5, PID) from the same initial particles.

Figures: (1) R(tau) and Q(tau) of GD at eta_tau in {0.4, 0.2, 0.1} against the flow, the GD-flow gap
against tau, and the energy identity dQ/dtau = -(1/(M L)) sum |v|^2 along the flow (P4); (2) the particle
clouds of two coordinates of V and of W2 per depth slice at tau = 0 and at the end of the flow.

Predictions: the gap falls first-order in eta_tau (halving eta_tau halves the gap), the energy identity holds
to <= 1e-3, Q never rises along the flow, and training reduces the risk. Full run (L = 8, M = 32,
64 prompts): about 2 minutes on 2 CPU cores; `--quick` (L = 4, M = 8, 32 prompts): about 30 s.
"""

from __future__ import annotations

import logging
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import flows  # noqa: E402
from flows import mean_field as mf  # noqa: E402
from flows.experiments import plotting, records  # noqa: E402

NAME = "mean_field_gd_vs_flow"
ETAS = (0.4, 0.2, 0.1)
SAVES = 30  # saves per GD run (steps are multiples of it, so one compiled program serves all)
DENSE = 6  # flow saves per GD save interval (the energy identity uses central differences on them)


def sizes(quick):
    if quick:
        return dict(d=3, D=4, N=8, L=4, M=8, n_train=32, n_test=128), 60.0
    return dict(d=3, D=4, N=8, L=8, M=32, n_train=64, n_test=512), 60.0


def main(argv=None) -> int:
    ns = records.example_parser(NAME, __doc__, seed=0).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    log = logging.getLogger(NAME)
    shape, tau_end = sizes(ns.quick)
    cfg = mf.Config(**shape, lam=1e-3, init_scale=2.0, seed=ns.seed)
    config = {
        **shape,
        "lam": cfg.lam,
        "init_scale": cfg.init_scale,
        "threshold": cfg.threshold,
        "init": cfg.init,
        "tau_end": tau_end,
        "eta_tau": list(ETAS),
        "quick": ns.quick,
    }
    with records.RunRecord(ns.out, name=NAME, config=config, seed=ns.seed, quick=ns.quick) as rec:
        data, test = mf.training_set(cfg), mf.held_out_set(cfg)
        p0 = mf.init_particles(cfg)
        # -- GD at three step sizes; equal numbers of saves, so one compiled program serves all three
        gd = {}
        for eta in ETAS:
            steps = round(tau_end / eta)
            assert steps % SAVES == 0
            start = time.perf_counter()
            gd[eta] = mf.train(cfg, lr=eta, steps=steps, save_every=steps // SAVES, particles=p0, data=data, test=test)
            rec.add_timing(f"gd_eta{eta:g}_call_s", time.perf_counter() - start)
            log.info(
                "GD eta_tau=%g: %d steps, compile %.1f s, run %.1f s", eta, steps, gd[eta].compile_s, gd[eta].run_s
            )
        # -- the flow, saved on a grid DENSE times finer than GD's (tau = k * tau_end / SAVES for GD)
        dense = flows.linear_grid(0.0, tau_end, SAVES * DENSE + 1)
        start = time.perf_counter()
        traj = mf.solve_flow(cfg, dense, particles=p0, data=data, test=test, rtol=1e-8, atol=1e-10, save_states=True)
        rec.add_timing("flow_call_s", time.perf_counter() - start)
        rec.add_solver_stats("particle_flow", traj)
        log.info("flow: %d steps, compile %.1f s, run %.1f s", int(traj.num_steps), traj.compile_s, traj.run_s)
        every = {k: np.asarray(v) for k, v in traj.observables.items()}
        flow = {k: v[::DENSE] for k, v in every.items()}
        ts = dense[::DENSE]
        assert np.allclose(ts, gd[ETAS[0]].tau, rtol=1e-12, atol=1e-12)
        # -- energy identity (central differences of the saved Q against the dissipation)
        Qd, diss = every["Q"], every["dissipation"]
        dQ = (Qd[2:] - Qd[:-2]) / (dense[2:] - dense[:-2])
        energy_rel = float(np.max(np.abs(dQ + diss[1:-1]) / diss[1:-1]))
        rise = float(np.max(np.diff(Qd)) / Qd[0])

        gaps = {eta: float(np.max(np.abs(gd[eta]["Q"] - flow["Q"]))) for eta in ETAS}
        for eta in ETAS:
            rec.add_metric(f"gap_Q_eta{eta:g}", gaps[eta])
            rec.add_metric(f"gap_R_eta{eta:g}", float(np.max(np.abs(gd[eta]["R"] - flow["R"]))))
        for big, small in zip(ETAS[:-1], ETAS[1:], strict=True):
            ratio = gaps[big] / gaps[small]
            rec.add_prediction(
                f"first_order_gap_ratio_eta{big:g}_over_eta{small:g}",
                ratio,
                "1.6 <= ratio <= 2.5: GD is explicit Euler of the particle flow, so halving "
                "eta_tau halves the gap (theory §2.4)",
                1.6 <= ratio <= 2.5,
            )
        rec.add_prediction(
            "energy_identity_max_rel_err",
            energy_rel,
            "<= 1e-3: dQ/dtau = -(1/(M L)) sum |v_att|^2 - (1/(M_mlp L)) sum |v_mlp|^2 (P4)",
            energy_rel <= 1e-3,
        )
        rec.add_prediction(
            "Q_max_relative_rise_along_flow",
            rise,
            "<= 1e-8: Q is non-increasing along the Wasserstein gradient flow (P4)",
            rise <= 1e-8,
        )
        drop = float(flow["R"][-1] / flow["R"][0])
        rec.add_prediction(
            "risk_ratio_end_over_start", drop, "< 0.5: the flow trains (R(tau_end) < R(0) / 2)", drop < 0.5
        )
        rec.add_metric("R_start", float(flow["R"][0]))
        rec.add_metric("R_end_flow", float(flow["R"][-1]))
        rec.add_metric("test_rmse_end_flow", float(flow["test_rmse"][-1]))
        rec.add_metric("max_speed_end_flow", float(flow["max_speed"][-1]))
        final = {k: v[-1] for k, v in traj.ys.items()}
        w2 = mf.observables.w2_per_slice(p0, final, method="exact")
        rec.add_metric("w2_start_to_end_attention_mean_over_slices", float(np.mean(w2["attention"])))
        rec.add_metric("w2_start_to_end_mlp_mean_over_slices", float(np.mean(w2["mlp"])))
        rec.add_series(w2_start_to_end_attention=w2["attention"], w2_start_to_end_mlp=w2["mlp"])
        rec.add_metric("coupled_rms_start_to_end", mf.observables.coupled_rms(p0, final))
        rec.add_series(
            tau=ts,
            **{f"flow_{k}": v for k, v in flow.items()},
            **{f"gd{eta:g}_{k}": v for eta in ETAS for k, v in gd[eta].observables.items()},
            dense_tau=dense,
            dense_Q=Qd,
            dense_dissipation=diss,
        )

        fig, axes = plotting.figure(1, 3, width=14.0, height=4.0)
        colors = plotting.colors(len(ETAS))
        ax = axes[0]
        for eta, c in zip(ETAS, colors, strict=True):
            label = rf"GD $\eta_\tau$={eta:g} ($\eta$={eta * cfg.M * cfg.L:g})"
            ax.plot(ts, gd[eta]["R"], color=c, lw=1.5, label=label)
        ax.plot(ts, flow["R"], "k--", lw=1.2, label="particle flow (Tsit5)")
        ax.plot(ts, flow["test_rmse"] ** 2 / 2, color="0.5", lw=1, ls=":", label="flow: fresh prompts")
        ax.set_yscale("log")
        ax.set_xlabel(r"flow time $\tau = k\,\eta_\tau$")
        ax.set_ylabel("risk R")
        ax.set_title(f"L={cfg.L}, M={cfg.M}: GD vs particle flow", fontsize=9)
        ax.legend(fontsize=7)
        ax = axes[1]
        for eta, c in zip(ETAS, colors, strict=True):
            ax.plot(ts[1:], np.abs(gd[eta]["Q"] - flow["Q"])[1:], color=c, label=rf"$\eta_\tau$={eta:g}")
        ax.set_yscale("log")
        ax.set_xlabel(r"$\tau$")
        ax.set_ylabel(r"$|Q_{GD}(\tau) - Q_{flow}(\tau)|$")
        ax.set_title("gap: first order in the step", fontsize=9)
        ax.legend(fontsize=7)
        ax = axes[2]
        ax.plot(dense[1:-1], -dQ, lw=2, color="C0", label=r"$-dQ/d\tau$ (finite differences)")
        ax.plot(dense, diss, "k--", lw=1, label=r"$\frac{1}{ML}\sum|v|^2$")
        ax.set_yscale("log")
        ax.set_xlabel(r"$\tau$")
        ax.set_title(f"energy identity (P4): max rel. err {energy_rel:.1e}", fontsize=9)
        ax.legend(fontsize=7)
        rec.save_figure(fig, "gd_vs_flow.png")

        # -- particle clouds: the two V coordinates and the two W2 coordinates that moved most
        dV = np.mean(np.abs(np.asarray(final["V"]) - np.asarray(p0["V"])), axis=(0, 1)).ravel()
        v_idx = [np.unravel_index(i, (cfg.D, cfg.D)) for i in np.argsort(dV)[::-1][:2]]
        dW2 = np.mean(np.abs(np.asarray(final["W2"]) - np.asarray(p0["W2"])), axis=(0, 1))
        w_idx = list(np.argsort(dW2)[::-1][:2])
        slices = sorted({0, cfg.L // 2, cfg.L - 1})
        fig, axes = plotting.figure(2, len(slices), width=4.0 * len(slices), height=7.0, squeeze=False)
        for col, layer in enumerate(slices):
            for row, (name, idx) in enumerate((("V", v_idx), ("W2", w_idx))):
                ax = axes[row, col]
                path = np.asarray(traj.ys[name][:, layer])  # (saves, particles, ...)
                px = path[(slice(None), slice(None)) + tuple(np.atleast_1d(idx[0]))]
                py = path[(slice(None), slice(None)) + tuple(np.atleast_1d(idx[1]))]
                ax.plot(px, py, color="C3", lw=0.5, alpha=0.4)
                for parts, style, label in (
                    (p0, dict(color="0.6", s=8), r"$\tau=0$"),
                    (final, dict(color="C3", s=10), rf"$\tau={tau_end:g}$"),
                ):
                    arr = np.asarray(parts[name][layer])
                    x = arr[(slice(None),) + tuple(np.atleast_1d(idx[0]))]
                    y = arr[(slice(None),) + tuple(np.atleast_1d(idx[1]))]
                    ax.scatter(x, y, label=label, **style)
                lab = [f"{name}[{','.join(str(int(i)) for i in np.atleast_1d(j))}]" for j in idx]
                ax.set_xlabel(lab[0])
                ax.set_ylabel(lab[1])
                ax.set_title(f"depth slice l={layer} (t={layer / cfg.L:.2f}): {name}", fontsize=9)
                ax.legend(fontsize=7)
        fig.suptitle("particle clouds per depth slice: two most-moved coordinates, paths of the flow", fontsize=10)
        rec.save_figure(fig, "particle_clouds.png")
    records.log_predictions(rec, log)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
