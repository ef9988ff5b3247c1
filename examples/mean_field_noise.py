"""Mean-field transformer, noisy (Fokker-Planck) flow: risk, entropy and free energy against the temperature T,
and the weak order of the SDE solver.

The diffusion term the reviewers of Gao et al., NeurIPS 2024, asked for (Mei-Montanari-Nguyen 2018, Thm 5;
docs/systems/mean_field.md): every coordinate of every particle (attention theta = (V, W), MLP w = (W1, W2)) follows

    d theta_{l,j} = v(theta)_{l,j} d tau + sqrt(2 T) dB_{l,j},      v = -grad_theta dQ/drho (the particle ODE),

whose empirical law per depth slice follows, as M -> infinity, the Fokker-Planck equation
d rho/d tau = div(rho grad dQ/drho) + T Laplacian rho: the Wasserstein gradient flow of the free energy

    F_T(rho) = Q(rho) - T H(rho),     H = (1/L) sum_l (H_att,l + H_mlp,l)   (differential entropy, nats).

`flows.mean_field.noise.solve_particles_sde` integrates the particle SDE with diffrax (`flows.solve_sde`:
additive noise, a `VirtualBrownianTree` with space-time Levy area, constant steps). The noise is additive, so
the shifted Euler method SEA (diffrax.SEA; Foster, dos Reis & Strange 2023, eq. 5.8; one drift evaluation per
step) has strong order 1, and weak order 1 (its drift is first order, like Euler-Maruyama's); at sigma = 0 it
is explicit Euler exactly. H is the Kozachenko-Leonenko k-NN estimate (`entropy_per_slice`, k = 3) of every
slice's attention cloud (R^{2 D^2}) and MLP cloud (R^{2 D}): biased at small M in these dimensions, so H and
F are compared across T at one (L, M), never against a closed form.

Runs (ONE compiled program serves all of them: T, dt, the horizon and the keys are runtime arguments; the
tree tolerance and max_steps are fixed, see `solve_particles_sde`):

1. Temperature sweep T in {0, 1e-4, 1e-3, 1e-2, 1e-1, 1}, P Brownian paths per T from one initialisation
   (the same keys at every T) to tau_end, at the largest step of 0.1, 0.05, ..., 0.1 / 64 that is stable on
   every path (`noise.solve_particles_sde_stable`: every path finite and every step moving the particles by at
   most a tenth of the largest one's norm, h Lambda <= 0.1 at every save; at high T the noise carries the
   weights to where the drift grows faster than linearly and an explicit step can run away, see
   `flows.mean_field.noise`): final risk R, late-time risk (R averaged over tau >= tau_end / 2), H and
   F_T = Q - T H at tau_end, path mean +- standard deviation, and the accepted step per T. The T = 0 solve is
   compared with the particle ODE `solve_flow(solver="euler", dt)` at its step (flows.solve, diffrax),
   and F_T of the noisy clouds with F_T of the ODE's clouds.
2. Weak convergence of E[R(tau_w = 2)] at T_w = 0.1 over several batches of P paths, dt = tau_w / 2^k. Common
   random numbers: the same keys and the same tree tolerance give the same Brownian paths at every dt, so
   E[R_dt] - E[R_dt/2] is a paired difference whose Monte-Carlo error is that of the pathwise (strong) error,
   not that of R; R also averages over all L (M + M_mlp) particles. The successive differences
   e_k = |E[R_{dt_k}] - E[R_{dt_k / 2}]| = C (1 - 2^-p) dt_k^p + ... give the weak order p with no reference
   solution's own error in it (Richardson); fitted by `flows.fitting.power_law_fit` (bootstrap interval).
   Why SEA and not a strong order 1.5 solver (SRA1, ShARK): SRA1's weak errors here are 25-50 times smaller
   than SEA's (measured at dt = 1/2 .. 1/8, M = 16, 4 paths) and below the paired Monte-Carlo error of a few
   paths at smaller dt, so its weak order would take far more paths to show.

Predictions: (1) T = 0: the SDE solve is the particle ODE (max |difference| of the particles over every path
and save < 1e-12). (2) Large T keeps the particles off the minimiser: the late-time risk at T = 1 exceeds
that at T = 0 by more than 3 standard errors of the path mean. (3) The entropy of the particle clouds grows
with T: the path-mean H strictly increases over T >= 1e-3 and exceeds H(T = 0) (at T = 1e-4 the diffusion
length sqrt(2 T tau) ~ 0.05 moves the k-NN distances by less than the estimator resolves: recorded only).
(4) The noisy flow is the gradient flow of F_T and the ODE is not: at every T >= 1e-2, F_T of the noisy
clouds at tau_end is below F_T of the ODE clouds. (5) SEA's weak order on E[R(tau_w)] is 1 within 0.15.
(6) Every weak difference exceeds 3 paired standard errors (statistical error below the discretisation
error). Not predicted, recorded: at finite tau moderate noise (T ~ 0.1) LOWERS the final risk below the ODE's
(the ODE is still descending slowly at tau_end; the noise speeds the descent up); the path-to-path spread
of R grows roughly like sqrt(T) at small T.

`--quick`: L = 2, M = 16, 16 prompts, 4 paths (12 for the weak test), tau_end = 10, dt_w = 1/2 .. 1/32;
full: M = 64, 32 prompts, 16 paths (32), tau_end = 20, dt_w = 1/2 .. 1/128 (the times are in
benchmarks/results/reproduce_quick.json and the record's meta.json).
"""

from __future__ import annotations

import logging

import jax

jax.config.update("jax_enable_x64", True)

import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

from flows import mean_field as mf  # noqa: E402
from flows.experiments import plotting, records  # noqa: E402
from flows.fitting import power_law_fit  # noqa: E402
from flows.mean_field.noise import MAX_STEP_RATIO, entropy_per_slice, solve_particles_sde, solve_particles_sde_stable  # noqa: E402

NAME = "mean_field_noise"
SOLVER = "sea"  # strong order 1 and weak order 1 for additive noise; explicit Euler at sigma = 0
TEMPS = (0.0, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
DT, HALVINGS = 0.1, 6  # the temperature sweep's first step, and how often it may be halved (noise module)
T_WEAK, TAU_WEAK = 0.1, 2.0
SAVES = 101  # saved times per solve (the same for every run: one compiled program); the step check reads them
K_NN = 3


def sizes(quick):
    """(M, n_train, paths, tau_end, k_max, batches): dt = TAU_WEAK / 2^k for k = 2 .. k_max in the weak test,
    on `batches` batches of `paths` paths (seeds seed, seed + 1, ...; one program)."""
    if quick:
        return 16, 16, 4, 10.0, 6, 3
    return 64, 32, 16, 20.0, 8, 2


def _entropy(particles):
    """H = mean over slices of H_att + H_mlp (nats) of one particle configuration."""
    h = entropy_per_slice({k: np.asarray(v) for k, v in particles.items()}, k=K_NN)
    return float(np.mean(h["attention"] + h["mlp"]))


def main(argv=None) -> int:
    ns = records.example_parser(
        NAME, __doc__, seed=0, seed_help="seed of the data, the initial particles and the Brownian paths"
    ).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    log = logging.getLogger(NAME)
    M, n_train, paths, tau_end, k_max, batches = sizes(ns.quick)
    cfg = mf.Config(d=2, D=3, N=4, L=2, M=M, n_train=n_train, n_test=16, lam=1e-2, init_scale=2.0, seed=ns.seed)
    dts_w = TAU_WEAK / 2.0 ** np.arange(2, k_max + 1)
    # one program: the tree tolerance below every step, max_steps for the longest solve, the same observables
    dt_min = DT / 2**HALVINGS
    tol = min(float(dts_w[-1]), dt_min) / 4
    max_steps = int(max(round(tau_end / dt_min), round(TAU_WEAK / dts_w[-1]))) + 1
    ts = np.linspace(0.0, tau_end, SAVES)
    ts_w = np.linspace(0.0, TAU_WEAK, SAVES)
    opts = dict(solver=SOLVER, num_paths=paths, tol=tol, max_steps=max_steps)
    config = {
        "d": cfg.d,
        "D": cfg.D,
        "N": cfg.N,
        "L": cfg.L,
        "M": cfg.M,
        "M_mlp": cfg.M_mlp,
        "n_train": cfg.n_train,
        "lam": cfg.lam,
        "init_scale": cfg.init_scale,
        "solver": SOLVER,
        "temperatures": list(TEMPS),
        "dt_first": DT,
        "dt_halvings": HALVINGS,
        "max_step_ratio": MAX_STEP_RATIO,
        "tau_end": tau_end,
        "paths": paths,
        "T_weak": T_WEAK,
        "tau_weak": TAU_WEAK,
        "dt_weak": dts_w.tolist(),
        "weak_paths": batches * paths,
        "vbt_tol": tol,
        "max_steps": max_steps,
        "k_nn": K_NN,
        "quick": ns.quick,
    }
    with records.RunRecord(ns.out, name=NAME, config=config, seed=ns.seed, quick=ns.quick) as rec:
        # ---- 1. temperature sweep
        R, Q, H, dt_T = {}, {}, {}, {}
        for T in TEMPS:
            tr, dt_T[T], ratio = solve_particles_sde_stable(cfg, ts, T, dt=DT, halvings=HALVINGS, seed=ns.seed, **opts)
            rec.add_metric(f"dt_T{T:g}", dt_T[T])
            rec.add_metric(f"step_ratio_max_T{T:g}", ratio)
            rec.add_solver_stats(
                f"sde_T{T:g}",
                {
                    "status": "ok" if tr.ok else "failed",
                    "message": tr.message[0],
                    "num_steps": int(tr.num_steps[0]),
                    "compile_s": tr.compile_s,
                    "run_s": tr.run_s,
                },
            )
            R[T], Q[T] = np.asarray(tr.observables["R"]), np.asarray(tr.observables["Q"])
            H[T] = np.array([_entropy({k: v[p, -1] for k, v in tr.ys.items()}) for p in range(paths)])
            if T == 0.0:
                sde0 = tr
            log.info(
                "T=%g (dt %g): R %.5g +- %.2g, H %.4g +- %.2g (compile %.1f s, run %.1f s)",
                T,
                dt_T[T],
                R[T][:, -1].mean(),
                R[T][:, -1].std(ddof=1),
                H[T].mean(),
                H[T].std(ddof=1),
                tr.compile_s,
                tr.run_s,
            )
        ode = mf.solve_flow(cfg, ts, solver="euler", dt=dt_T[0.0], observables="basic", save_states=True)
        rec.add_solver_stats("ode_euler", ode)
        log.info("ODE (euler, dt=%g): compile %.1f s, run %.1f s", dt_T[0.0], ode.compile_s, ode.run_s)

        diff0 = max(float(np.max(np.abs(np.asarray(sde0.ys[k]) - np.asarray(ode.ys[k])[None]))) for k in ode.ys)
        rec.add_prediction(
            "zero_T_sde_minus_ode_max_abs",
            diff0,
            "< 1e-12: at T = 0 the particle SDE (SEA, explicit Euler at sigma = 0) is the particle "
            "ODE solve_flow(solver='euler', dt), on every path and at every save",
            diff0 < 1e-12,
        )
        H_ode = _entropy({k: v[-1] for k, v in ode.ys.items()})
        H_init = _entropy(mf.init_particles(cfg))
        rec.add_metric("H_initial", H_init)

        mean = {T: (R[T][:, -1].mean(), Q[T][:, -1].mean(), H[T].mean()) for T in TEMPS}
        sd = {T: (R[T][:, -1].std(ddof=1), Q[T][:, -1].std(ddof=1), H[T].std(ddof=1)) for T in TEMPS}
        F = {T: Q[T][:, -1] - T * H[T] for T in TEMPS}  # F_T at tau_end, per path
        Q_ode, R_ode = float(np.asarray(ode.observables["Q"])[-1]), float(np.asarray(ode.observables["R"])[-1])
        for T in TEMPS:
            tag = f"T{T:g}"
            rec.add_metric(f"R_final_{tag}", mean[T][0])
            rec.add_metric(f"R_final_sd_{tag}", sd[T][0])
            rec.add_metric(f"Q_final_{tag}", mean[T][1])
            rec.add_metric(f"H_final_{tag}", mean[T][2])
            rec.add_metric(f"H_final_sd_{tag}", sd[T][2])
            rec.add_metric(f"F_final_{tag}", float(F[T].mean()))
            rec.add_metric(f"F_final_sd_{tag}", float(F[T].std(ddof=1)))

        # late-time risk: R averaged over the saves in [tau_end / 2, tau_end] (per path)
        late = ts >= tau_end / 2
        R_late = {T: R[T][:, late].mean(axis=1) for T in TEMPS}
        for T in TEMPS:
            rec.add_metric(f"R_late_T{T:g}", float(R_late[T].mean()))
            rec.add_metric(f"R_late_sd_T{T:g}", float(R_late[T].std(ddof=1)))
        T_max = TEMPS[-1]
        se_R = np.sqrt((R_late[T_max].var(ddof=1) + R_late[0.0].var(ddof=1)) / paths)
        dR = float(R_late[T_max].mean() - R_late[0.0].mean())
        rec.add_prediction(
            "late_risk_rise_at_T1_in_standard_errors",
            dR / max(se_R, 1e-300),
            f"> 3: at large T the noise keeps the particles off the minimiser: the late-time risk "
            f"(R averaged over tau in [tau_end/2, tau_end]) at T = {T_max:g} exceeds the T = 0 value by "
            f"more than 3 standard errors of the path mean (T = 0: {R_late[0.0].mean():.4g}, "
            f"T = {T_max:g}: {R_late[T_max].mean():.4g})",
            dR > 3 * se_R,
        )
        rec.add_metric("R_min_over_T", min(mean[T][0] for T in TEMPS))
        rec.add_metric("T_of_min_R", min(TEMPS, key=lambda T: mean[T][0]))

        Hs = np.array([mean[T][2] for T in TEMPS])
        big = [i for i, T in enumerate(TEMPS) if T >= 1e-3]
        steps = np.diff(Hs[big])
        rec.add_prediction(
            "entropy_increments_over_T_ge_1e-3_min",
            float(min(steps.min(), Hs[big[0]] - Hs[0])),
            "> 0: the k-NN entropy of the particle clouds (path mean) increases strictly with T over "
            "T >= 1e-3 and exceeds H(T = 0)",
            bool(np.all(steps > 0) and Hs[big[0]] > Hs[0]),
        )
        rec.add_metric("H_gain_T1e-4_over_T0", float(Hs[1] - Hs[0]))

        # F_T of the noisy endpoint against F_T of the ODE endpoint (the same functional on both clouds)
        gaps = {}
        for T in TEMPS:
            if T < 1e-2:
                continue
            gaps[T] = float(F[T].mean() - (Q_ode - T * H_ode))
            rec.add_metric(f"F_noisy_minus_F_ode_T{T:g}", gaps[T])
        rec.add_prediction(
            "free_energy_gap_noisy_minus_ode_max",
            max(gaps.values()),
            "< 0: the noisy flow is the gradient flow of F_T = Q - T H and the ODE is not, so at every "
            "T >= 1e-2 F_T of the noisy clouds at tau_end is below F_T of the ODE clouds",
            max(gaps.values()) < 0,
        )

        # ---- 2. weak convergence on E[R(tau_w)] at T_w, common Brownian paths for every dt
        Rw = []
        for dt in dts_w:
            runs = [
                # save_states as in the sweep's stable solves: one compiled program
                solve_particles_sde(cfg, ts_w, T_WEAK, dt=float(dt), seed=ns.seed + b, save_states=True, **opts)
                for b in range(batches)
            ]
            Rw.append(np.concatenate([np.asarray(tr.observables["R"])[:, -1] for tr in runs]))
            log.info(
                "weak: dt=%g: E[R] %.8g (compile %.1f s, run %.2f s)",
                dt,
                Rw[-1].mean(),
                sum(tr.compile_s for tr in runs),
                sum(tr.run_s for tr in runs),
            )
        Rw = np.array(Rw)  # (levels, weak paths): the same Brownian paths at every level
        d = Rw[:-1] - Rw[1:]  # paired successive differences
        e = np.abs(d.mean(axis=1))
        se = d.std(axis=1, ddof=1) / np.sqrt(d.shape[1])
        fit = power_law_fit(dts_w[:-1], e, n_boot=2000, rng=0)
        log.info(
            "weak differences %s (se %s): order %.3f [%.3f, %.3f]",
            np.array2string(e, precision=3),
            np.array2string(se, precision=2),
            fit.slope,
            *fit.slope_ci,
        )
        rec.add_metric("weak_order", fit.slope)
        rec.add_metric("weak_order_ci_lo", fit.slope_ci[0])
        rec.add_metric("weak_order_ci_hi", fit.slope_ci[1])
        rec.add_prediction(
            "weak_order_sea",
            fit.slope,
            "1 within 0.15: SEA's weak order for additive noise (Euler-Maruyama's too); power-law fit "
            "of |E[R_dt] - E[R_dt/2]| against dt on common Brownian paths (its 95% interval is recorded "
            "as ci; with 4-6 nearly collinear points it can be narrower than the pre-asymptotic "
            "curvature, hence the tolerance)",
            abs(fit.slope - 1.0) <= 0.15,
            ci=list(fit.slope_ci),
        )
        ratio = float(np.min(e / se))
        rec.add_prediction(
            "weak_difference_over_paired_se_min",
            ratio,
            "> 3: every weak difference exceeds 3 paired Monte-Carlo standard errors (common random "
            "numbers make the statistical error smaller than the discretisation error)",
            ratio > 3,
        )

        rec.add_series(
            tau=ts,
            temperatures=np.array(TEMPS),
            tau_weak=ts_w,
            dt_weak=dts_w,
            R_weak=Rw,
            weak_diff=e,
            weak_diff_se=se,
            R_ode=np.asarray(ode.observables["R"]),
            Q_ode=np.asarray(ode.observables["Q"]),
            H_ode_final=H_ode,
            **{f"R_T{T:g}": R[T] for T in TEMPS},
            **{f"Q_T{T:g}": Q[T] for T in TEMPS},
            **{f"H_final_T{T:g}": H[T] for T in TEMPS},
            **{f"F_final_T{T:g}": F[T] for T in TEMPS},
        )

        # ---- figure
        fig, axes = plotting.figure(2, 3, width=15.0, height=8.0)
        axes = axes.ravel()
        x_zero = min(T for T in TEMPS if T > 0) / 10  # where T = 0 is drawn on the log axes
        xT = np.array([T if T > 0 else x_zero for T in TEMPS])
        zero_label = f"temperature T  (T = 0 drawn at {x_zero:g})"

        def band(ax, values, **kw):
            m = np.array([np.mean(values[T]) for T in TEMPS])
            s = np.array([np.std(values[T], ddof=1) for T in TEMPS])
            ax.errorbar(xT, m, yerr=s, capsize=3, **kw)

        ax = axes[0]
        band(ax, {T: R[T][:, -1] for T in TEMPS}, marker="o", color="C0", label=rf"final R ($\tau$ = {tau_end:g})")
        band(ax, R_late, marker="s", color="C1", label=r"late-time R ($\tau \geq \tau_{end}/2$)")
        ax.axhline(R_ode, color="0.4", ls=":", lw=1, label="ODE (T = 0)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(zero_label)
        ax.set_ylabel(r"risk R (path mean $\pm$ sd)")
        ax.set_title(f"risk vs temperature ({paths} paths, SEA)", fontsize=9)
        ax.legend(fontsize=7)

        ax = axes[1]
        band(ax, F, marker="o", color="C3", label=r"$F_T$ of the noisy clouds")
        ax.plot(xT, [Q_ode - T * H_ode for T in TEMPS], "k:", marker="x", label=r"$F_T$ of the ODE clouds")
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=1e-2)
        ax.set_xlabel(zero_label)
        ax.set_ylabel(r"$F_T = Q - T H$ at $\tau_{end}$")
        ax.set_title("entropy-regularised objective (free energy)", fontsize=9)
        ax.legend(fontsize=7)

        ax = axes[2]
        band(ax, H, marker="s", color="C2", label="noisy clouds")
        ax.axhline(H_ode, color="0.4", ls=":", lw=1, label="ODE clouds")
        ax.axhline(H_init, color="0.7", ls="--", lw=1, label=r"initial clouds ($\tau$ = 0)")
        ax.set_xscale("log")
        ax.set_xlabel(zero_label)
        ax.set_ylabel("k-NN entropy H (nats), mean over slices")
        ax.set_title(rf"entropy of the particle clouds at $\tau$ = {tau_end:g}", fontsize=9)
        ax.legend(fontsize=7)

        ax = axes[3]
        for T, c in zip(TEMPS, plotting.colors(len(TEMPS)), strict=True):
            ax.plot(ts, R[T].mean(axis=0), color=c, label=f"T = {T:g}")
            ax.fill_between(ts, R[T].min(axis=0), R[T].max(axis=0), color=c, alpha=0.15, lw=0)
        ax.set_yscale("log")
        ax.set_xlabel(r"flow time $\tau$")
        ax.set_ylabel("risk R (path mean, band min-max)")
        ax.set_title("training curves", fontsize=9)
        ax.legend(fontsize=7)

        ax = axes[4]
        Tp = np.array([T for T in TEMPS if T > 0])
        spread = np.array([R[T][:, -1].std(ddof=1) for T in Tp])
        ax.plot(Tp, spread, "o-", color="C4", label="sd over paths of the final R")
        ax.plot(Tp, spread[0] * np.sqrt(Tp / Tp[0]), color="0.6", ls=":", label=r"$\propto \sqrt{T}$")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("temperature T")
        ax.set_ylabel("path-to-path spread of R")
        ax.set_title(r"noise response of R (reference: $\sqrt{T}$)", fontsize=9)
        ax.legend(fontsize=7)

        ax = axes[5]
        ax.errorbar(
            dts_w[:-1],
            e,
            yerr=se,
            marker="o",
            color="C0",
            capsize=3,
            ls="none",
            label=r"$|E[R_{dt}] - E[R_{dt/2}]|$ ($\pm$ paired se)",
        )
        ax.plot(
            dts_w[:-1],
            fit.predict(dts_w[:-1]),
            "k--",
            lw=1,
            label=f"fit: order {fit.slope:.2f} [{fit.slope_ci[0]:.2f}, {fit.slope_ci[1]:.2f}]",
        )
        ax.plot(dts_w[:-1], e[-1] * (dts_w[:-1] / dts_w[-2]), color="0.6", lw=1, ls=":", label="slope 1")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xticks(dts_w[:-1], [f"1/{round(1 / h):d}" for h in dts_w[:-1]])
        ax.set_xlabel("step dt")
        ax.set_ylabel(rf"weak difference of R($\tau$ = {TAU_WEAK:g})")
        ax.set_title(f"weak convergence, SEA, T = {T_WEAK:g}, {Rw.shape[1]} common paths", fontsize=9)
        ax.legend(fontsize=7)
        rec.save_figure(fig, "noise.png")
    records.log_predictions(rec, log)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
