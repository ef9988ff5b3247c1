"""Mean-field transformer (Gao et al. 2024): particle solve, compile, GD vs PyTorch eager, equal-accuracy first calls.

Also the GD FLOP rate against the machine's matmul rate, and scaling in the particle count. All in float64.
Sizes: the issue's network L = 8, M = 256 (M_mlp = M), D = 4, N = 8, 64 prompts (`--quick`: L = 4, M = 32).
Rows (`benchmarks._harness.row`):

- `mean_field/particle_solve(tsit5)`: `mf.solve_flow` to tau = 0.5 at rtol 1e-6 saving Q and R;
  compile_s, run_s_min, steps (accepted + rejected), error = |Q(tau)| relative gap to dopri8 at rtol 1e-10
  (full run only).
- `mean_field/vector_field_compile`: cold compile of the particle vector field (the velocity of every
  particle, what the explicit solvers call) in a fresh process with the compile cache off, with the compile
  options the library's programs use (`flows._xla.compiler_options()`), and of the
  whole solve in the same process (`solve_compile_s`); ratio = budget 1.5 s / vector-field compile.
- `mean_field/gd` and `mean_field/gd_torch_eager`: full-batch GD steps (same forward, same loss with weight
  decay, same learning rates) by `mf.train` (recording Q and R only) and by the same network written
  in PyTorch eager (float64, the heads-last contraction order of `model.attention_update`, the fastest
  of the three orders tried; CPU, torch's default intra-op threads), timed back to back; error = the
  largest relative gap of Q and of the gradient between the two at the initial particles; ratio =
  (flows particle-steps/s) / (torch particle-steps/s), target 2. Skipped with a note without torch.
- `mean_field/gd_flop_rate`: FLOPs of one GD step (counted analytically, `_step_flops`; XLA's cost
  analysis of the one-layer step times L as a cross-check) over its measured time, against the float64
  rate of a 2048 x 2048 `jnp.dot` (best of repeats) measured in the same run.
- Floors: the vector-field compile against the compile of a trivial program in the same process; GD (and its
  ratio to torch) against its FLOPs at the measured matmul rate; the flow's first call against imports + a
  bare diffrax solve of the same state size compiled in a fresh process + the flow's own data and run
  (`benchmarks._harness.bare_diffrax`), a ratio target the floor does not allow restated as within 1.5x of it.
- `mean_field/first_call_equal_accuracy(...)`: the first call end to end (imports, data, initial state,
  compile, solve or train) of the adaptive particle solve and of GD, each in a fresh process with the
  compile cache off, at the same accuracy: the relative error of Q(tau = 1) against a dopri8 reference
  (rtol 1e-11) is at most 1e-4, and 1e-6 (full run), for both; the flow's rtol (1e-3, 1e-4, ...) and GD's
  eta_tau = 1 / steps (steps = 2, 4, 8, ...) are the cheapest of their grids that reach it. ratio = GD
  first call / flow first call (> 1: the flow is cheaper). Sizes L = 4, M = 64 (quick: L = 2, M = 16).
- `mean_field/gd_scaling(P=...)` and `mean_field/gd_scaling_fit`: time per GD step against the particle
  count P = L (M + M_mlp) at L = 4, N = 4, 16 prompts, P from 128 to 10^5 (quick: 128 to 2048), one
  compile per shape (not timed), best of repeats; the fit row holds the exponent alpha of
  s_per_step ~ P^alpha (log-log least squares over P >= 2048 with a bootstrap interval,
  `flows.fitting.power_law_fit`).
- `mean_field/flow_scaling(P=...)` and `mean_field/flow_scaling_fit`: the same for the adaptive particle
  solve (tsit5, rtol 1e-6, tau = 0.25) at the same P = 128 ... 10^5 (quick: 128 ... 2048):
  `s_per_unit_time` = run time / tau, and its exponent fitted over P >= 2048 as for GD.
"""

from __future__ import annotations

import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks._harness import bare_diffrax, bench_main, best_of, fresh_process, ratio, restate, row, versus  # noqa: E402
from flows import fitting  # noqa: E402
from flows import mean_field as mf  # noqa: E402
from flows.mean_field import model as mf_model  # noqa: E402

SCALING_M = (16, 64, 256, 1024, 4096, 12500)  # P = 8 M at L = 4: 128 ... 100000 particles
SCALING_PROMPTS = 16  # N = 4, 16 prompts: the attention intermediates of P = 1e5 stay well under 1 GB
FLOW_SCALING_M = SCALING_M  # the adaptive solve at the same P = 128 ... 100000
COMPILE_BUDGET_S = 1.5
EQUAL_ACCURACY = (1e-4, 1e-6)  # relative errors of Q(tau = 1) against the dopri8 reference (quick: 1e-4)


def _shape(quick: bool) -> dict:
    return dict(d=3, D=4, N=8, L=4, M=32, n_train=64) if quick else dict(d=3, D=4, N=8, L=8, M=256, n_train=64)


def _config(shape: dict) -> mf.Config:
    return mf.Config(**shape, lam=1e-3, init_scale=2.0, seed=0)


def _params(cfg: mf.Config) -> dict:
    return {
        "L": cfg.L,
        "M": cfg.M,
        "M_mlp": cfg.M_mlp,
        "D": cfg.D,
        "N": cfg.N,
        "n_train": cfg.n_train,
        "particles": cfg.num_particles,
        "dtype": "float64",
    }


def run(quick: bool) -> list[dict]:
    cfg = _config(_shape(quick))
    rows = particle_solve(cfg, quick)
    rows += vector_field_compile(_shape(quick))
    rows += gd_throughput(cfg, quick)
    rows += first_call_equal_accuracy(quick)
    rows += scaling(quick)
    rows += flow_scaling(quick)
    return rows


# --------------------------------------------------------------------------- particle solve


def particle_solve(cfg: mf.Config, quick: bool) -> list[dict]:
    ts = np.array([0.0, 0.25, 0.5])
    repeats = 2 if quick else 3
    traj = mf.solve_flow(cfg, ts, observables="basic", rtol=1e-6, atol=1e-8)
    run_s = best_of(lambda: mf.solve_flow(cfg, ts, observables="basic", rtol=1e-6, atol=1e-8).observables, repeats)
    error = None
    if not quick:  # the reference compiles a second program; the full run measures the error
        ref = mf.solve_flow(cfg, ts, observables="basic", solver="dopri8", rtol=1e-10, atol=1e-12)
        q_ref = float(ref.observables["Q"][-1])
        error = abs(float(traj.observables["Q"][-1]) - q_ref) / abs(q_ref)
    return [
        row(
            "mean_field/particle_solve(tsit5)",
            params={**_params(cfg), "tau": 0.5, "rtol": 1e-6},
            compile_s=traj.compile_s,
            run_s_min=run_s,
            repeats=repeats,
            steps=int(traj.num_steps),
            error=error,
        )
    ]


# --------------------------------------------------------------------------- compile of the vector field

_COMPILE_CHILD = """
import json, time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from flows import mean_field as mf
from flows.mean_field import flow, observables as obs
from flows import _xla
t_import = time.perf_counter() - t0
cfg = mf.Config(**{shape}, lam=1e-3, init_scale=2.0, seed=0)
p = mf.init_particles(cfg)
args = obs.make_args(cfg, mf.training_set(cfg), mf.held_out_set(cfg))
jitted = jax.jit(lambda p, a: flow._vector_field_rev(0.0, p, a))
t = time.perf_counter(); lowered = jitted.lower(p, args); trace_s = time.perf_counter() - t
t = time.perf_counter(); compiled = _xla.compile_lowered(lowered); vf_compile_s = time.perf_counter() - t
jax.block_until_ready(compiled(p, args))
t = time.perf_counter(); _xla.compile_lowered(jax.jit(lambda x: 2.0 * x + 1.0).lower(1.0))
trivial_s = time.perf_counter() - t
traj = mf.solve_flow(cfg, np.array([0.0, 0.5]), observables="basic", rtol=1e-6, atol=1e-8)
print(json.dumps({{"import_s": t_import, "trace_s": trace_s, "vf_compile_s": vf_compile_s,
                  "solve_compile_s": traj.compile_s, "trivial_s": trivial_s}}))
"""


def vector_field_compile(shape: dict) -> list[dict]:
    out = fresh_process(_COMPILE_CHILD.format(shape=repr(shape)))
    compile_s = out["vf_compile_s"]
    return [
        row(
            "mean_field/vector_field_compile",
            params={**_params(_config(shape)), "fresh_process": True},
            compile_s=compile_s,
            run_s_min=None,
            repeats=1,
            trace_s=out["trace_s"],
            solve_compile_s=out["solve_compile_s"],
            task="compile",
            ratio=ratio(COMPILE_BUDGET_S / compile_s, f"budget {COMPILE_BUDGET_S} s / compile", target=1),
            floor=versus(compile_s, out["trivial_s"], "XLA's compile of a trivial program (x -> 2x + 1), after it"),
        )
    ]


# --------------------------------------------------------------------------- GD throughput and FLOP rate


def _torch_network(cfg: mf.Config, particles: dict, data):
    """(objective(params) -> scalar tensor, params as leaf tensors): the same network in PyTorch eager."""
    import torch

    tp = {k: torch.tensor(np.asarray(v), dtype=torch.float64, requires_grad=True) for k, v in particles.items()}
    Z0 = torch.tensor(np.asarray(data.Z0), dtype=torch.float64)
    y = torch.tensor(np.asarray(data.y), dtype=torch.float64)
    h0, lam, d = cfg.threshold, cfg.lam, cfg.d

    def huberized_relu(z):
        pos = torch.clamp(z, min=0.0)
        return torch.where(z > h0, z - 0.5 * h0, 0.5 * pos * pos / h0)

    def attention(Z, V, W):  # heads-last order, as model.attention_update
        n, D, K = Z.shape
        M = V.shape[0]
        ZZ = torch.einsum("ndk,nei->nikde", Z, Z).reshape(n * K * K, D * D)
        S = torch.softmax((ZZ @ W.reshape(M, D * D).T).reshape(n, K, K, M), dim=2)
        VZ = torch.einsum("ndk,mcd->nkmc", Z, V).reshape(n, K * M, D)
        return torch.einsum("nix,nxc->nci", S.reshape(n, K, K * M), VZ)

    def objective(p):
        L, M = p["V"].shape[:2]
        Mm = p["W1"].shape[1]
        sa, sm = 1.0 / (M * L), 1.0 / (Mm * L)
        Z = Z0
        for layer in range(L):
            Z = Z + sa * attention(Z, p["V"][layer], p["W"][layer])
            pre = torch.einsum("jd,ndk->njk", p["W1"][layer], Z)
            Z = Z + sm * torch.einsum("jc,njk->nck", p["W2"][layer], huberized_relu(pre))
        err = Z[:, d, -1] - y
        decay = (
            0.5
            * lam
            * (sa * (p["V"].pow(2).sum() + p["W"].pow(2).sum()) + sm * (p["W1"].pow(2).sum() + p["W2"].pow(2).sum()))
        )
        return 0.5 * torch.mean(err * err) + decay

    return objective, tp


def _torch_gd(objective, tp: dict, lr: dict, steps: int):
    import torch

    for _ in range(steps):
        for t in tp.values():
            t.grad = None
        objective(tp).backward()
        with torch.no_grad():
            for k, t in tp.items():
                t.sub_(lr[k] * t.grad)
    return tp


def _matmul_rate(repeats: int, n: int = 2048) -> float:
    """FLOP/s of a float64 n x n `jnp.dot` (best of repeats)."""
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float64)
    dot = jax.jit(jnp.dot).lower(a, a).compile()
    return 2 * n**3 / best_of(lambda: dot(a, a), repeats)


def _step_flops(cfg: mf.Config) -> float:
    """FLOPs of one GD step as executed (2 per multiply-add of every contraction; elementwise work such as
    the softmax not counted), per layer with n prompts, K = N + 1 tokens, M heads, M_mlp neurons:

    - attention: the logits product n K^2 D^2 M four times (forward, recomputed in the backward pass, dW,
      d(pairs)), the weighted sum, dVZ and dS n K^2 M D three times, VZ = V z n K M D^2 four times
      (forward, recomputed, dZ, dV), the pair-product adjoint 2 n K^2 D^2;
    - MLP: n K M_mlp D six times (pre-activation, output, and four in the backward pass).
    """
    n, K, D, M, Mm = cfg.n_train, cfg.N + 1, cfg.D, cfg.M, cfg.M_mlp
    macs = (
        4 * n * K**2 * D**2 * M + 3 * n * K**2 * M * D + 4 * n * K * M * D**2 + 2 * n * K**2 * D**2 + 6 * n * K * Mm * D
    )
    return 2.0 * macs * cfg.L


def _step_flops_xla(cfg: mf.Config) -> float:
    """XLA's cost analysis of the one-layer gradient, times L (the analysis counts the body of the depth loop
    once; at L = 1 XLA may also merge the recomputed logits with the forward ones, so this is a lower
    bound, kept as a cross-check of `_step_flops`)."""
    one = cfg.replace(L=1)
    p = mf.init_particles(one)
    data = mf.training_set(one)
    grad = jax.jit(
        jax.grad(lambda p: mf_model.objective_value(p, data.Z0, data.y, one.lam, one.threshold, one.d, True))
    )
    cost = grad.lower(p).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost["flops"]) * cfg.L


def gd_throughput(cfg: mf.Config, quick: bool, matmul_n: int = 2048) -> list[dict]:
    steps = 5 if quick else 10
    repeats = 2 if quick else 3
    eta = 0.05
    P = cfg.num_particles
    params = {**_params(cfg), "steps": steps, "eta_tau": eta}
    rec = mf.train(cfg, "gd", eta, steps, save_every=steps, observables="basic")  # compiles

    def flows_gd():
        return mf.train(cfg, "gd", eta, steps, save_every=steps, observables="basic").particles

    rows = []
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None:
        gd_s = best_of(flows_gd, repeats)
        rows.append(
            row(
                "mean_field/gd",
                params=params,
                compile_s=rec.compile_s,
                run_s_min=gd_s,
                repeats=repeats,
                steps=steps,
                particle_steps_per_s=steps * P / gd_s,
                s_per_step=gd_s / steps,
            )
        )
        rows.append(
            row(
                "mean_field/gd_torch_eager",
                params=params,
                compile_s=None,
                run_s_min=None,
                repeats=0,
                note="skipped: torch is not installed (pip install '.[bench]')",
            )
        )
    else:
        particles, data = mf.init_particles(cfg), mf.training_set(cfg)
        objective, tp = _torch_network(cfg, particles, data)
        q_t = objective(tp)
        q_t.backward()
        q_t = float(q_t.detach())
        g_j = jax.jit(
            jax.grad(lambda p: mf_model.objective_value(p, data.Z0, data.y, cfg.lam, cfg.threshold, cfg.d, True))
        )(particles)
        q_j = mf.objective(cfg, particles, data)
        gaps = [
            float(np.max(np.abs(tp[k].grad.numpy() - np.asarray(g_j[k]))) / np.max(np.abs(np.asarray(g_j[k]))))
            for k in g_j
        ]
        error = max([abs(float(q_t) - float(q_j)) / abs(float(q_j))] + gaps)
        lr = {"V": rec.lr_attention, "W": rec.lr_attention, "W1": rec.lr_mlp, "W2": rec.lr_mlp}
        _torch_gd(objective, tp, lr, 1)  # warm up the allocator
        gd_s, torch_s = float("inf"), float("inf")
        for _ in range(repeats):  # interleaved, so that both see the same machine load
            gd_s = min(gd_s, best_of(flows_gd, 1))
            fresh = {k: v.detach().clone().requires_grad_(True) for k, v in tp.items()}
            begin = time.perf_counter()
            _torch_gd(objective, fresh, lr, steps)
            torch_s = min(torch_s, time.perf_counter() - begin)
        rows.append(
            row(
                "mean_field/gd",
                params=params,
                compile_s=rec.compile_s,
                run_s_min=gd_s,
                repeats=repeats,
                steps=steps,
                particle_steps_per_s=steps * P / gd_s,
                s_per_step=gd_s / steps,
            )
        )
        rows.append(
            row(
                "mean_field/gd_torch_eager",
                params={**params, "torch": torch.__version__, "torch_threads": torch.get_num_threads()},
                compile_s=0.0,
                run_s_min=torch_s,
                repeats=repeats,
                steps=steps,
                error=error,
                particle_steps_per_s=steps * P / torch_s,
                s_per_step=torch_s / steps,
                ratio=ratio(torch_s / gd_s, "flows GD / torch eager (particle-steps/s)", target=2),
            )
        )
    flops = _step_flops(cfg)
    flops_xla = _step_flops_xla(cfg)
    matmul = _matmul_rate(repeats + 2, matmul_n)
    achieved = flops * steps / rows[0]["run_s_min"]
    floor = versus(rows[0]["run_s_min"], flops * steps / matmul, "the GD steps' FLOPs at the float64 matmul rate")
    for r in rows:
        if r["bench"] == "mean_field/gd_torch_eager" and r.get("ratio"):
            r["floor"], r["task"] = floor, "network beside its limit"
    rows.append(
        row(
            "mean_field/gd_flop_rate",
            params=params,
            compile_s=None,
            run_s_min=rows[0]["run_s_min"],
            repeats=repeats,
            steps=steps,
            flops_per_step=flops,
            flops_per_step_xla=flops_xla,
            achieved_flop_s=achieved,
            matmul_flop_s=matmul,
            matmul_size=matmul_n,
            task="network beside its limit",
            ratio=ratio(achieved / matmul, "GD step FLOP rate / float64 matmul rate"),
            floor=floor,
        )
    )
    return rows


# --------------------------------------------------------------------------- flow vs GD at equal accuracy

_FLOW_CHILD = """
import json, time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from flows import mean_field as mf
t_import = time.perf_counter() - t0
t = time.perf_counter()
cfg = mf.Config(**{shape}, lam=1e-3, init_scale=2.0, seed=0)
traj = mf.solve_flow(cfg, np.array([0.0, {tau}]), observables="basic", rtol={rtol}, atol={atol})
print(json.dumps({{"import_s": t_import, "call_s": time.perf_counter() - t, "compile_s": traj.compile_s,
                  "Q": float(traj.observables["Q"][-1]), "steps": int(traj.num_steps)}}))
"""

_GD_CHILD = """
import json, time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
from flows import mean_field as mf
t_import = time.perf_counter() - t0
t = time.perf_counter()
cfg = mf.Config(**{shape}, lam=1e-3, init_scale=2.0, seed=0)
rec = mf.train(cfg, "gd", {eta}, {steps}, save_every={steps}, observables="basic")
print(json.dumps({{"import_s": t_import, "call_s": time.perf_counter() - t, "compile_s": rec.compile_s,
                  "Q": float(rec.observables["Q"][-1])}}))
"""


def first_call_equal_accuracy(quick: bool) -> list[dict]:
    shape = dict(d=3, D=4, N=8, L=2, M=16, n_train=32) if quick else dict(d=3, D=4, N=8, L=4, M=64, n_train=64)
    cfg, tau = _config(shape), 1.0
    ref = mf.solve_flow(cfg, np.array([0.0, tau]), observables="basic", solver="dopri8", rtol=1e-11, atol=1e-13)
    q_ref = float(ref.observables["Q"][-1])

    def rel(q):
        return abs(q - q_ref) / abs(q_ref)

    flow_err, gd_err = {}, {}  # the errors on each grid, computed in this process (programs reused)
    bare = None  # the bare diffrax floor, measured once
    rows = []
    for accuracy in EQUAL_ACCURACY[:1] if quick else EQUAL_ACCURACY:
        flow_tol = None
        for rtol in (1e-3, 1e-4, 1e-5, 1e-6, 1e-7):  # each tolerance compiles its own solve
            if rtol not in flow_err:
                traj = mf.solve_flow(cfg, np.array([0.0, tau]), observables="basic", rtol=rtol, atol=rtol * 1e-2)
                flow_err[rtol] = rel(float(traj.observables["Q"][-1]))
            if flow_err[rtol] <= accuracy:
                flow_tol = rtol
                break
        gd_steps = None
        for steps in 2 ** np.arange(1, 15):
            steps = int(steps)
            if steps not in gd_err:
                rec = mf.train(cfg, "gd", tau / steps, steps, save_every=steps, observables="basic")
                gd_err[steps] = rel(float(rec.observables["Q"][-1]))
            if gd_err[steps] <= accuracy:
                gd_steps = steps
                break
        params = {
            **_params(cfg),
            "tau": tau,
            "accuracy": accuracy,
            "reference": "dopri8 rtol 1e-11",
            "flow_rtol": flow_tol,
            "gd_steps": gd_steps,
            "gd_eta_tau": None if gd_steps is None else tau / gd_steps,
        }
        label = f"acc={accuracy:g},L={cfg.L},M={cfg.M}"
        if flow_tol is None or gd_steps is None:
            rows.append(
                row(
                    f"mean_field/first_call_equal_accuracy({label})",
                    params=params,
                    compile_s=None,
                    run_s_min=None,
                    note="no setting on the grids reached the accuracy",
                )
            )
            continue
        flow = fresh_process(_FLOW_CHILD.format(shape=repr(shape), tau=tau, rtol=flow_tol, atol=flow_tol * 1e-2))
        gd = fresh_process(_GD_CHILD.format(shape=repr(shape), eta=tau / gd_steps, steps=gd_steps))
        if bare is None:
            bare = bare_diffrax(int(sum(np.size(v) for v in mf.init_particles(cfg).values())), 2)
        # the flow's own data, initial state and run, with a bare diffrax solve's imports and compile
        floor_s = bare["imports"] + (flow["call_s"] - flow["compile_s"]) + bare["compile_total"]
        of = "imports + a bare diffrax solve compiled + the flow's data and run"
        rat, fl = restate(
            ratio(gd["wall_s"] / flow["wall_s"], "GD first call / flow first call at equal accuracy", target=1),
            gd["wall_s"] / floor_s,
            versus(flow["wall_s"], floor_s, of),
        )
        rows += [
            row(
                f"mean_field/first_call_equal_accuracy(flow,{label})",
                params=params,
                compile_s=flow["compile_s"],
                run_s_min=flow["wall_s"],
                repeats=1,
                steps=flow["steps"],
                error=rel(flow["Q"]),
                import_s=flow["import_s"],
                call_s=flow["call_s"],
                first_call_s=flow["wall_s"],
                task="first call",
                floor=versus(flow["wall_s"], floor_s, of),
                bare_diffrax=bare,
            ),
            row(
                f"mean_field/first_call_equal_accuracy(gd,{label})",
                params=params,
                compile_s=gd["compile_s"],
                run_s_min=gd["wall_s"],
                repeats=1,
                steps=gd_steps,
                error=rel(gd["Q"]),
                import_s=gd["import_s"],
                call_s=gd["call_s"],
                first_call_s=gd["wall_s"],
                task="network beside its limit",
                ratio=rat,
                floor=fl,
            ),
        ]
    return rows


# --------------------------------------------------------------------------- scaling


def _fit_row(bench: str, rows: list[dict], key: str, min_P: float) -> dict:
    P = np.array([r["params"]["particles"] for r in rows], float)
    y = np.array([r[key] for r in rows])
    use = P >= min_P
    fit = fitting.power_law_fit(P[use], y[use], n_boot=2000, rng=0, interval="percentile") if use.sum() >= 3 else None
    return row(
        bench,
        params={"P": P.tolist(), "fit_over": P[use].tolist(), "quantity": key},
        compile_s=None,
        run_s_min=None,
        repeats=0,
        exponent=None if fit is None else float(fit.slope),
        exponent_ci=None if fit is None else [float(c) for c in fit.slope_ci],
    )


def scaling(quick: bool) -> list[dict]:
    """Time per GD step against the particle count, and the fitted exponent."""
    Ms = SCALING_M[:3] if quick else SCALING_M  # quick: P = 128 ... 2048, fitted over all three
    rows = []
    for M in Ms:
        cfg = mf.Config(d=3, D=4, N=4, L=4, M=M, n_train=SCALING_PROMPTS, lam=1e-3, init_scale=2.0, seed=0)
        P = cfg.num_particles
        steps = 2 if P >= 32768 or quick else 5
        repeats = 1 if P >= 32768 or quick else 3
        rec = mf.train(cfg, "gd", 0.05, steps, save_every=steps, observables="basic")  # compiles
        run_s = best_of(
            lambda cfg=cfg, steps=steps: (
                mf.train(cfg, "gd", 0.05, steps, save_every=steps, observables="basic").particles
            ),
            repeats,
        )
        rows.append(
            row(
                f"mean_field/gd_scaling(P={P})",
                params={**_params(cfg), "steps": steps},
                compile_s=rec.compile_s,
                run_s_min=run_s,
                repeats=repeats,
                steps=steps,
                particle_steps_per_s=steps * P / run_s,
                s_per_step=run_s / steps,
            )
        )
    return rows + [_fit_row("mean_field/gd_scaling_fit", rows, "s_per_step", 0 if quick else 2048)]


def flow_scaling(quick: bool) -> list[dict]:
    """Run time per unit flow time of the adaptive particle solve against the particle count."""
    Ms = FLOW_SCALING_M[:3] if quick else FLOW_SCALING_M
    tau = 0.25
    rows = []
    for M in Ms:
        cfg = mf.Config(d=3, D=4, N=4, L=4, M=M, n_train=SCALING_PROMPTS, lam=1e-3, init_scale=2.0, seed=0)
        ts = np.array([0.0, tau])
        traj = mf.solve_flow(cfg, ts, observables="basic", rtol=1e-6, atol=1e-8)  # compiles
        repeats = 1 if quick or cfg.num_particles >= 32768 else 2
        run_s = best_of(
            lambda cfg=cfg, ts=ts: mf.solve_flow(cfg, ts, observables="basic", rtol=1e-6, atol=1e-8).observables,
            repeats,
        )
        rows.append(
            row(
                f"mean_field/flow_scaling(P={cfg.num_particles})",
                params={**_params(cfg), "tau": tau, "rtol": 1e-6, "solver": "tsit5"},
                compile_s=traj.compile_s,
                run_s_min=run_s,
                repeats=repeats,
                steps=int(traj.num_steps),
                s_per_unit_time=run_s / tau,
                s_per_step=run_s / max(int(traj.num_steps), 1),
            )
        )
    return rows + [_fit_row("mean_field/flow_scaling_fit", rows, "s_per_unit_time", 0 if quick else 2048)]


def main(argv=None) -> int:
    return bench_main("mean_field", run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
