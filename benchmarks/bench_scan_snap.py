"""Scan and Snap (Tian et al. 2023): Fig. 6 sweep, first calls (T->inf flow vs SGD), compiles, scaling, sweeps.

Rows (`benchmarks._harness.row`), each with its floor or best peer (`floor`, measured in this run):

- `scan_snap/fig6_sweep`: `examples/scan_snap_fig6.py` run in a fresh process (compile cache off);
  `run_s_min` = the wall time of its vmapped training sweeps (`network.train_sweeps`: per K the wait for its
  start and compile, prepared on a thread while the K before runs, plus its run; compiles included as the
  example pays them; `sweep_run_s` the runs alone), `example_s` = the whole example (plots, record), and whether its
  predictions held. Floor (`fig6_floor`): per K, the three dense products of every member and step at the
  batched float64 GEMM rate measured at the sweep's shapes, plus the uniforms the run draws (one batch per
  distinct seed and step: the members of one seed share their batches), each timed the
  fastest known way (the product under a sweep's and a training sweep's compile options, the draw by JAX's
  threefry and by the library's fused one); target within 1.5x of it. Full run: the paper's 4 L x 16 cells
  x 10 seeds; --quick: the example's quick mode.
- `scan_snap/first_call(flow|sgd, steps=...)` and `scan_snap/first_call_ratio(steps=...)`: Fig. 4 on
  Syn-Small (SGD momentum 0.9, batch 128, T = 128, zero init, eta_Y = eta_Z = 1) end to end in fresh
  processes: imports, data, initial state, compile and solve of the T->inf (Y, Z) flow up to the flow time
  steps / (1 - 0.9) vs imports, data, init, compile and training. `error` is ||Z_SGD - Z_flow||_F /
  ||Z_flow||_F at the final time. Targets: 10 at the Fig. 4 size (100 steps), 2 at the quick size (30);
  floor: imports + a bare diffrax solve of the same state size and save points compiled in a fresh process
  + the flow's own data and run (a target the floor does not allow is restated as within 1.5x of it).
- `scan_snap/first_call_cached(flow,steps=30)`: the flow's script run twice in fresh processes with one new
  compile-cache folder: the second run, against itself without tracing, lowering or loading its program.
- `scan_snap/vector_field_compile(...)`: for the full (Y, Z) flow, the reduced Z-flow and the decoder h-flow,
  the compile of the jitted vector field alone (`compile_s`, target 1.5 s; with the compile options the
  library's programs use, `flows._xla.compiler_options()`) and of its whole `flows.solve`
  program (`solve_compile_s`), in a fresh process; floor: the compile of a trivial program there.
- `scan_snap/flow_scaling(M=...)` and `scan_snap/flow_scaling_fit`: wall time per unit flow time of the full
  (Y, Z) flow (tsit5, rtol 1e-8) on K = 2 Zipfian classes against the vocabulary M (64 ... 4096), and the
  exponent of s_per_unit_time ~ M^alpha (`flows.fitting.power_law_fit`).
- `scan_snap/sweep(n=256)`, `scan_snap/sweep_diffrax_vmap(n=256)`, `scan_snap/sweep_python_loop(n=256)`: 256
  (eta_Y, eta_Z) pairs of the reduced Z-flow on Syn-Small in one `solve_flow` call (`flows.solve_batch`, its
  default strategy: lockstep chunks of 64 consecutive members, `flows._sweep`) vs a Python loop of cached single
  solves (the same compiled program reused) and vs the best peer, `jax.vmap` of a bare `diffrax.diffeqsolve`;
  `error` = the largest difference of the final Z between them. Floor: the vector-field evaluations of the
  members' own solves, batched (`benchmarks._sweeps`). Where the time goes: `member_steps` (the vmapped
  members' step counts), `lockstep_steps` (the most of any chunk), `chunk_steps` (each chunk's), `vmapped_s`
  (the same sweep vmapped), `no_observables_s` (without the saved observables), `save_chunks`. Target: the
  loop / sweep >= 20 (restated against the floor when the loop over the floor is below it).
  `scan_snap/sweep_symmetric...`: the same for the generated class-symmetric reduced flow (target 50).
- `scan_snap/adam_ode(t=20)`, `scan_snap/adam_train(lr=..., steps=...)` and `scan_snap/adam_ode_ratio(lr=...)`:
  the Adam ODE of `solve_flow(optimizer="adam")` (c1 = 1, c2 = 0.01, to t = 20, 101 saves; the sizes of
  `examples/scan_snap_adam.py`) against optax Adam (b = 1 - c lr) on the same population loss trained to the
  same horizon (`flows.optim_limits.run_optax`, 21 saves) at lr = 0.1 and 0.025: first calls in fresh
  processes (compile cache off) and the best of repeats after compile in this process; `error` = sup over
  the shared save times of |c_Adam - c_ODE| / sup |c_ODE(t) - c_ODE(0)| (the example's relative gap).
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import _sweeps as sweeps  # noqa: E402
from benchmarks._harness import (  # noqa: E402
    FLOOR_TARGET,
    bare_diffrax,
    bench_main,
    best_of,
    fresh_process,
    ratio,
    restate,
    row,
    versus,
)
from flows import _sweep, _xla, fitting, solve, solve_batch  # noqa: E402
from flows._chunked import SAVE_CHUNK  # noqa: E402
from flows.scan_snap import solve_flow, syn_small, zipfian  # noqa: E402
from flows.scan_snap.flow import symmetric_vector_field  # noqa: E402

COMPILE_BUDGET_S = 1.5
MOMENTUM = 0.9
SCALING_M = (64, 128, 256, 512, 1024, 2048, 4096)
SCALING_T1 = 2.0

# --------------------------------------------------------------------------- Fig. 6 sweep
_FIG6_CHILD = """
import json, runpy, sys, tempfile, time
t0 = time.perf_counter()
mod = runpy.run_path("examples/scan_snap_fig6.py")
from flows.experiments import records
out = tempfile.mkdtemp()
mod["main"]({argv!r} + ["--out", out])
wall = time.perf_counter() - t0
rec = records.load_record(out)
timings = rec["meta"].get("timings", {{}})
preds = {{k: bool(v["holds"]) for k, v in rec["metrics"].items() if isinstance(v, dict) and "holds" in v}}
print(json.dumps({{"example_s": wall, "timings": timings, "predictions": preds}}))
"""


def fig6_sizes(quick: bool) -> dict:
    """The sizes of `examples/scan_snap_fig6.py`: its query counts L, members per L, distinct seeds among them,
    steps, batch, T."""
    Ls, cells, seeds = ([1, 3], 4, 3) if quick else ([1, 3, 5, 10], 16, 10)
    return {"L": Ls, "members": cells * seeds, "seeds": seeds, "steps": 100, "batch": 128, "T": 128}


#: timed repeats of each part of the Fig. 6 floor (the fastest counts): with 3, the batched GEMM rate varied
#: between quiet runs by enough to change the verdict against the floor
FIG6_FLOOR_REPEATS = 9


def fig6_floor(quick: bool, repeats: int = FIG6_FLOOR_REPEATS) -> dict:
    """The floor of the Fig. 6 sweep (module docstring), per K: the three dense products of each member and
    step, (B, M) @ (M, M), (M, B) @ (B, M), (B, M) @ (M, M) (forward, decoder gradient, input gradient), timed
    as one batched float64 product at the sweep's shape (members, B, M) @ (members, M, M), three per step; and
    the draws: the (seeds, B, T - 1) uniforms of one step, timed (`train_sweep` draws each step's batch once per
    distinct seed, which that seed's members share). Each part is timed the fastest known way:
    the product with the compile options of a sweep's program and of a training sweep's (`flows._xla`), the
    draw with JAX's threefry and with the library's (`flows._prng.fused`, the same bits), the faster of each
    counting. The floor is their sum over the steps and the K. `dot_flops` counts 3 x 2 B M^2 per member and
    step."""
    from flows._prng import fused
    from flows.scan_snap import syn_medium

    size = fig6_sizes(quick)
    R, B, T, steps, U = size["members"], size["batch"], size["T"], size["steps"], size["seeds"]
    parts = {}
    key = jax.random.PRNGKey(2)
    for L in size["L"]:
        M = syn_medium(L).vocab_size
        a = jax.random.normal(jax.random.PRNGKey(0), (R, B, M))
        b = jax.random.normal(jax.random.PRNGKey(1), (R, M, M))
        dots, draws = {}, {}
        for kind in (True, "training"):
            product = _xla.jit(lambda x, y: x @ y, batched=kind)
            jax.block_until_ready(product(a, b))
            dots[f"batched={kind}"] = best_of(lambda p=product, a=a, b=b: p(a, b), repeats)
            for name, wrap in (("jax", lambda k: k), ("fused", fused)):
                draw = _xla.jit(lambda k, w=wrap: jax.random.uniform(w(k), (U, B, T - 1), jnp.float64), batched=kind)
                jax.block_until_ready(draw(key))
                draws[f"{name}, batched={kind}"] = best_of(lambda d=draw: d(key), repeats)
        dot_s, draw_s = min(dots.values()), min(draws.values())
        flops = 3 * 2 * B * M * M * R * steps
        parts[f"K{2 * L}"] = {
            "M": M,
            "dots_s": 3 * steps * dot_s,
            "draws_s": steps * draw_s,
            "dot_flops": flops,
            "gemm_flop_s": 2 * B * M * M * R / dot_s,
            "product_s": dots,
            "draw_s": draws,
        }
    total = sum(p["dots_s"] + p["draws_s"] for p in parts.values())
    return {"floor_s": total, "parts": parts, "dot_flops": sum(p["dot_flops"] for p in parts.values())}


def fig6_sweep(quick: bool) -> list[dict]:
    """The Fig. 6 example in a fresh process: its sweep time (summed over K, compiles included, as the example
    pays them), its compile and run parts, its predictions, and its floor (`fig6_floor`, this run)."""
    out = fresh_process(_FIG6_CHILD.format(argv=["--quick"] if quick else []))
    timings = out["timings"]
    sweeps_s = {k: v for k, v in timings.items() if k.startswith("sweep_")}
    sweep_s = float(sum(sweeps_s.values()))
    compile_s = float(sum(v for k, v in timings.items() if k.startswith("compile_")))
    run_s = float(sum(v for k, v in timings.items() if k.startswith("run_")))
    floor = fig6_floor(quick)
    size = fig6_sizes(quick)
    params = {
        "quick": quick,
        "cells_x_seeds": "2 L x 4 cells x 3 seeds" if quick else "4 L x 16 cells x 10 seeds",
        "fresh_process": True,
        **size,
    }
    of = "the dense products at the measured batched GEMM rate + the uniforms drawn, per step and K"
    return [
        row(
            "scan_snap/fig6_sweep",
            params=params,
            compile_s=compile_s,
            run_s_min=sweep_s,
            repeats=1,
            task="sweep",
            sweep_s=sweeps_s,
            sweep_run_s=run_s,
            example_s=out["example_s"],
            process_s=out["wall_s"],
            predictions_hold=all(out["predictions"].values()),
            predictions=out["predictions"],
            floor=versus(sweep_s, floor["floor_s"], of, target=FLOOR_TARGET),
            run_vs_floor=floor["floor_s"] / run_s if run_s else None,
            floor_parts=floor["parts"],
            dot_flops=floor["dot_flops"],
            note=(
                "run_s_min: the sweeps with their waits for start and compile; sweep_run_s: the runs; "
                "run_vs_floor = floor / it"
            ),
        )
    ]


# --------------------------------------------------------------------------- first calls, Fig. 4 sizes
def fig4_times(steps: int) -> np.ndarray:
    """The save times of `examples/scan_snap_fig4.py`: iterations 0, 2, ..., 10 and the last, in flow time."""
    t = np.arange(steps + 1) * (1.0 / (1.0 - MOMENTUM))  # the record's ts (step / (1 - beta))
    return np.unique(t[[0, 2, 4, 6, 8, 10, steps]])


_FLOW_CHILD = """
import json, time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
if {cached!r}:
    from flows.experiments import compile_cache
    compile_cache.enable()
import numpy as np
from flows.scan_snap import solve_flow, syn_small
t_import = time.perf_counter() - t0
t = time.perf_counter()
classes = syn_small()
ts = np.array({ts!r})
tr = solve_flow(classes, 1.0, 1.0, ts, solver="tsit5", rtol=1e-8, atol=1e-10)
Z = np.asarray(tr.ys["Z"][-1])
call_s = time.perf_counter() - t
np.save({path!r}, Z)
print(json.dumps({{"import_s": t_import, "call_s": call_s, "compile_s": tr.compile_s, "run_s": tr.run_s,
                  "steps": int(tr.num_steps)}}))
"""

_SGD_CHILD = """
import json, time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from flows.scan_snap import syn_small, train
t_import = time.perf_counter() - t0
t = time.perf_counter()
classes = syn_small()
r = train(classes, "sgd", 1.0, 1.0, 128, 128, {steps}, momentum={momentum}, init="zero", seed=2)
Z = np.asarray(r.Z[-1])
call_s = time.perf_counter() - t
np.save({path!r}, Z)
print(json.dumps({{"import_s": t_import, "call_s": call_s}}))
"""


def first_call(steps: int, target: float) -> list[dict]:
    """Flow vs SGD first call at `steps` SGD iterations (Fig. 4: 100; the example's quick mode: 30), the flow's
    first call against its bare-diffrax floor (`benchmarks._harness.bare_diffrax`, this run) and, at the quick
    size, a rerun of the flow's script with the compile cache against the rerun without its program load."""
    ts = fig4_times(steps)
    with tempfile.TemporaryDirectory() as tmp:
        zf, zs = os.path.join(tmp, "flow.npy"), os.path.join(tmp, "sgd.npy")
        flow = fresh_process(_FLOW_CHILD.format(ts=ts.tolist(), path=zf, cached=False))
        sgd = fresh_process(_SGD_CHILD.format(steps=steps, momentum=MOMENTUM, path=zs))
        Z_flow, Z_sgd = np.load(zf), np.load(zs)
        reruns = None
        if steps == 30:
            cache = os.path.join(tmp, "cache")
            child = _FLOW_CHILD.format(ts=ts.tolist(), path=zf, cached=True)
            reruns = [fresh_process(child, cache_dir=cache) for _ in range(2)]
    err = float(np.linalg.norm(Z_sgd - Z_flow) / np.linalg.norm(Z_flow))
    classes = syn_small()
    size = classes.vocab_size**2 + len(classes.query_tokens) * classes.vocab_size  # Y and Z's query rows
    bare = bare_diffrax(size, len(ts))
    own = flow["call_s"] - flow["compile_s"] - flow["run_s"]  # data, initial state, checks: the flow's own
    floor_s = bare["imports"] + own + bare["compile_total"] + flow["run_s"]
    of = "imports + a bare diffrax solve compiled + the flow's data and run"
    params = {
        "classes": "syn_small",
        "steps": steps,
        "t1": float(ts[-1]),
        "T": 128,
        "batch": 128,
        "momentum": MOMENTUM,
        "fresh_process": True,
    }
    rat, fl = restate(
        ratio(sgd["wall_s"] / flow["wall_s"], "SGD first call / flow first call", target=target),
        sgd["wall_s"] / floor_s,
        versus(flow["wall_s"], floor_s, of),
    )
    rows = [
        row(
            f"scan_snap/first_call(flow,steps={steps})",
            params=params,
            compile_s=flow["compile_s"],
            run_s_min=flow["wall_s"],
            repeats=1,
            steps=flow["steps"],
            error=err,
            task="first call",
            floor=versus(flow["wall_s"], floor_s, of),
            import_s=flow["import_s"],
            call_s=flow["call_s"],
            solve_run_s=flow["run_s"],
            first_call_s=flow["wall_s"],
            bare_diffrax=bare,
        ),
        row(
            f"scan_snap/first_call(sgd,steps={steps})",
            params=params,
            compile_s=None,
            run_s_min=sgd["wall_s"],
            repeats=1,
            steps=steps,
            error=err,
            import_s=sgd["import_s"],
            call_s=sgd["call_s"],
            first_call_s=sgd["wall_s"],
        ),
        row(
            f"scan_snap/first_call_ratio(steps={steps})",
            params=params,
            compile_s=None,
            run_s_min=None,
            error=err,
            task="network beside its limit",
            after_imports=sgd["call_s"] / flow["call_s"],
            ratio=rat,
            floor=fl,
        ),
    ]
    if reruns is not None:
        again = reruns[1]
        rows.append(
            row(
                f"scan_snap/first_call_cached(flow,steps={steps})",
                params={**params, "compile_cache": "a fresh folder, filled by the first of two runs"},
                compile_s=again["compile_s"],
                run_s_min=again["wall_s"],
                repeats=1,
                steps=again["steps"],
                task="rerun with the compile cache",
                ratio=ratio(flow["wall_s"] / again["wall_s"], "first call without the cache / rerun with it"),
                floor=versus(
                    again["wall_s"],
                    again["wall_s"] - again["compile_s"],
                    "the rerun without tracing, lowering or loading its program (imports, data, run)",
                    target=FLOOR_TARGET,
                ),
                first_run_s=reruns[0]["wall_s"],
                import_s=again["import_s"],
            )
        )
    return rows


# --------------------------------------------------------------------------- compile per vector field
_COMPILE_CHILD = """
import json, time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpy as np
from flows.scan_snap import decoder, solve_decoder, solve_flow, syn_small
from flows.scan_snap import flow
from flows import _xla
t_import = time.perf_counter() - t0
jax.block_until_ready(jax.jit(lambda x: x + 1.0)(1.0))  # the backend's own start-up is not a field's compile
t = time.perf_counter(); _xla.compile_lowered(jax.jit(lambda x: 2.0 * x + 1.0).lower(1.0))
trivial_s = time.perf_counter() - t
classes = syn_small()
M, K = classes.vocab_size, classes.num_classes
args = flow.flow_args(classes, 1.0, 1.0, query_rows=True)  # the state solve_flow integrates: Z's query rows
L = len(classes.query_tokens)
fields = {{
    "full_YZ_flow": (flow.full_vector_field, {{"Y": np.zeros((M, M)), "Z": np.zeros((L, M))}}, args,
                     lambda: solve_flow(classes, 1.0, 1.0, [0.0, 10.0])),
    "reduced_Z_flow": (flow.reduced_vector_field, {{"Z": np.zeros((L, M)), "h": np.zeros(()), "B": np.zeros((K,))}},
                       args, lambda: solve_flow(classes, 10.0, 1.0, [0.0, 10.0], reduced=True)),
    "decoder_h_flow": (decoder.decoder_vector_field, np.zeros(()), {{"M": jnp.asarray(float(M)),
                       "eta_Y": jnp.asarray(1.0)}}, lambda: solve_decoder(float(M), 1.0, [0.0, 10.0])),
}}
out = {{"import_s": t_import, "trivial_s": trivial_s}}
for name, (vf, y, a, solve_it) in fields.items():
    jitted = jax.jit(lambda y, a, vf=vf: vf(0.0, y, a))
    t = time.perf_counter(); lowered = jitted.lower(y, a); trace_s = time.perf_counter() - t
    t = time.perf_counter(); compiled = _xla.compile_lowered(lowered); vf_compile_s = time.perf_counter() - t
    jax.block_until_ready(compiled(y, a))
    t = time.perf_counter(); tr = solve_it(); solve_first_s = time.perf_counter() - t
    out[name] = {{"trace_s": trace_s, "vf_compile_s": vf_compile_s, "solve_compile_s": tr.compile_s,
                 "solve_first_call_s": solve_first_s}}
print(json.dumps(out))
"""


def vector_field_compile() -> list[dict]:
    out = fresh_process(_COMPILE_CHILD.format())
    rows = []
    for name in ("full_YZ_flow", "reduced_Z_flow", "decoder_h_flow"):
        o = out[name]
        rows.append(
            row(
                f"scan_snap/vector_field_compile({name})",
                params={"classes": "syn_small", "M": 34, "fresh_process": True},
                compile_s=o["vf_compile_s"],
                run_s_min=None,
                repeats=1,
                trace_s=o["trace_s"],
                solve_compile_s=o["solve_compile_s"],
                solve_first_call_s=o["solve_first_call_s"],
                task="compile",
                ratio=ratio(COMPILE_BUDGET_S / o["vf_compile_s"], f"budget {COMPILE_BUDGET_S:g} s / compile", target=1),
                floor=versus(o["vf_compile_s"], out["trivial_s"], "XLA's compile of a trivial program (x -> 2x + 1)"),
            )
        )
    return rows


# --------------------------------------------------------------------------- scaling in the vocabulary M
def scaling_classes(M: int):
    """K = 2 Zipfian classes (10 common tokens, (M - 14) / 2 distinct tokens each) with vocabulary M."""
    if M < 16 or M % 2:
        raise ValueError(f"M must be an even integer >= 16, got {M!r}")
    return zipfian(num_queries=2, next_per_query=1, num_distinct=(M - 14) // 2, num_common=10)


def scaling_row(M: int, repeats: int, t1: float = SCALING_T1) -> dict:
    classes = scaling_classes(M)
    assert classes.vocab_size == M
    ts = [0.0, t1]
    tr = solve_flow(classes, 1.0, 1.0, ts)
    run_s = best_of(lambda: solve_flow(classes, 1.0, 1.0, ts).ys, repeats)
    return row(
        f"scan_snap/flow_scaling(M={M})",
        params={"M": M, "K": 2, "t1": t1, "solver": "tsit5", "rtol": 1e-8},
        compile_s=tr.compile_s,
        run_s_min=run_s,
        repeats=repeats,
        steps=int(tr.num_steps),
        s_per_unit_time=run_s / t1,
        s_per_step=run_s / max(int(tr.num_steps), 1),
    )


def scaling_fit(rows: list[dict], min_M: int, key: str = "s_per_unit_time") -> dict:
    M = np.array([r["params"]["M"] for r in rows], dtype=float)
    y = np.array([r[key] for r in rows], dtype=float)
    use = M >= min_M
    fit = fitting.power_law_fit(M[use], y[use], n_boot=2000, rng=0, interval="percentile") if use.sum() >= 3 else None
    return row(
        "scan_snap/flow_scaling_fit",
        params={"M": M.tolist(), "fit_over": M[use].tolist(), "quantity": key},
        compile_s=None,
        run_s_min=None,
        repeats=0,
        exponent=None if fit is None else float(fit.slope),
        exponent_ci=None if fit is None else [float(c) for c in fit.slope_ci],
    )


def scaling(quick: bool) -> list[dict]:
    Ms = (64, 256, 1024) if quick else SCALING_M
    rows = [scaling_row(M, repeats=1 if (quick or M >= 2048) else 3) for M in Ms]
    return rows + [scaling_fit(rows, min_M=64 if quick else 256)]


# --------------------------------------------------------------------------- batched sweep vs Python loop
def sweep_pairs(n: int):
    """n (eta_Y, eta_Z) pairs on a sqrt(n) x sqrt(n) log grid (eta_Y in [1, 10], eta_Z in [0.5, 2])."""
    side = int(round(np.sqrt(n)))
    if side * side != n:
        raise ValueError(f"n must be a perfect square, got {n!r}")
    eY, eZ = np.meshgrid(np.geomspace(1.0, 10.0, side), np.geomspace(0.5, 2.0, side), indexing="ij")
    return eY.ravel(), eZ.ravel()


def _sweep_rows(name, params, *, batch, loop, final, field, y0, bargs, ts, target, repeats, loop_repeats, no_obs=None):
    """The rows of one sweep (module docstring). `batch()` runs the sweep as a user calls it (the default
    strategy of `flows.solve_batch`), `loop()` the Python loop of cached single solves (a list of the members'
    final states, each raveled); `final(ys, saved)` the same (n, -1) array from a batch's `ys` (`saved=True`:
    leaves (n, saves, ...)) or from the diffrax peer's final states (`saved=False`: leaves (n, ...)); `field`,
    `y0` (one member's state), `bargs` (batched args) and `ts` are the flow it solves, for the floor and the
    peer; `no_obs()` the same sweep without observables (or None)."""
    first = batch()
    sweep_s = best_of(lambda: batch().ts, repeats)
    with _strategy("vmap"):
        vmapped = batch()  # compile
        vmap_s = best_of(lambda: batch().ts, repeats)
    finals = loop()  # compile the single solve
    loop_s = best_of(loop, loop_repeats)
    err = float(np.max(np.abs(final(first.ys, True) - np.stack([np.ravel(f) for f in finals]))))
    n = int(np.shape(first.ts)[0])
    steps = sweeps.member_steps(vmapped.num_steps)
    ys = jax.tree_util.tree_map(lambda a: np.broadcast_to(np.asarray(a), (n,) + np.shape(a)), y0)
    evals = sweeps.evaluations(vmapped.num_steps)
    floor_s, eval_s = sweeps.field_floor(field, ys, bargs, 0, evals, repeats=max(5, repeats))
    peer = sweeps.diffrax_vmap(field, y0, bargs, ts, rtol=1e-8, atol=1e-10, batch_y0=False, batch_args=True,
                               repeats=repeats)  # fmt: skip
    peer_err = float(np.max(np.abs(final(first.ys, True) - final(peer["final"], False))))
    of_floor = "the vector-field evaluations of the members' own solves, batched (benchmarks._sweeps)"
    rat, fl = restate(
        ratio(loop_s / sweep_s, "Python loop of cached solves / sweep", target=target),
        loop_s / floor_s,
        versus(sweep_s, floor_s, of_floor),
    )
    diag = {
        "member_steps": steps,
        "lockstep_steps": int(np.max(first.num_steps)),
        "chunk_steps": [int(first.num_steps[index[0]]) for index, _ in _sweep.chunks(n, _width(y0))],
        "vmapped_s": vmap_s,
        "loop_over_vmapped": loop_s / vmap_s,
        "field_eval_s": eval_s,
        "evaluations_per_member": float(np.mean(evals)),
        "save_chunks": -(-len(ts) // SAVE_CHUNK),
        "strategy": _sweep.config.strategy,
    }
    if no_obs is not None:
        no_obs()
        diag["no_observables_s"] = best_of(lambda: no_obs().ts, repeats)
    return [
        row(
            f"scan_snap/{name}(n={n})",
            params=params,
            compile_s=first.compile_s,
            run_s_min=sweep_s,
            repeats=repeats,
            steps=int(np.max(first.num_steps)),
            error=err,
            task="sweep",
            ratio=rat,
            floor=fl,
            **diag,
        ),
        row(
            f"scan_snap/{name}_diffrax_vmap(n={n})",
            params=params,
            compile_s=None,
            run_s_min=peer["run_s"],
            repeats=repeats,
            steps=int(np.max(peer["num_steps"])),
            error=peer_err,
            task="sweep",
            ratio=ratio(loop_s / peer["run_s"], "Python loop of cached flows solves / jax.vmap of bare diffeqsolve"),
            floor=versus(peer["run_s"], floor_s, of_floor),
            note="the best peer: jax.vmap of diffrax.diffeqsolve (Tsit5, same tolerances and saves), no flows",
        ),
        row(
            f"scan_snap/{name}_python_loop(n={n})",
            params=params,
            compile_s=None,
            run_s_min=loop_s,
            repeats=loop_repeats,
            steps=None,
            error=err,
        ),
    ]


def _width(y0) -> int:
    """The entries of one member's state."""
    return sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(y0))


class _strategy:
    """`flows._sweep.config.strategy` set for a block (the benchmark times both strategies in one run)."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.old, _sweep.config.strategy = _sweep.config.strategy, self.name

    def __exit__(self, *exc):
        _sweep.config.strategy = self.old


def sweep(n: int = 256, ts=(0.0, 1.0, 10.0, 30.0), loop_repeats: int = 1, repeats: int = 3) -> list[dict]:
    """The reduced Z-flow on Syn-Small over n (eta_Y, eta_Z) pairs (`sweep_pairs`): `solve_flow` with rate
    arrays against a loop of `solve_flow` calls (module docstring)."""
    from flows.scan_snap.flow import flow_args, reduced_vector_field

    classes = syn_small()
    eY, eZ = sweep_pairs(n)
    M, K, L = classes.vocab_size, classes.num_classes, len(classes.query_tokens)
    args = flow_args(classes, 1.0, 1.0, query_rows=True)
    bargs = {k: np.broadcast_to(np.asarray(v), (n,) + np.shape(v)) for k, v in args.items()} | {
        "eta_Y": eY,
        "eta_Z": eZ,
    }
    y0 = {"Z": np.zeros((L, M)), "h": np.zeros(()), "B": np.zeros((K,))}
    kw = dict(t1=float(ts[-1]), ts=np.asarray(ts), rtol=1e-8, atol=1e-10)

    qt = list(classes.query_tokens)

    def loop():
        return [
            np.asarray(solve_flow(classes, a, b, ts, reduced=True).ys["Z"][-1])[qt] for a, b in zip(eY, eZ, strict=True)
        ]

    def final(ys, saved):  # Z's query rows at t1
        Z = np.asarray(ys["Z"])
        return (Z[:, -1][:, qt] if saved else Z).reshape(Z.shape[0], -1)

    params = {"classes": "syn_small", "flow": "reduced", "n": n, "t1": float(ts[-1]), "solver": "tsit5"}
    rows = _sweep_rows(
        "sweep",
        params,
        batch=lambda: solve_flow(classes, eY, eZ, ts, reduced=True),
        loop=loop,
        final=final,
        field=reduced_vector_field,
        y0=y0,
        bargs=bargs,
        ts=ts,
        target=20,
        repeats=repeats,
        loop_repeats=loop_repeats,
        no_obs=lambda: solve_batch(reduced_vector_field, y0, args=bargs, **kw),
    )
    return rows


def sweep_symmetric(n: int = 256, ts=(0.0, 1.0, 10.0, 30.0), loop_repeats: int = 1, repeats: int = 3) -> list[dict]:
    """The same sweep for the generated class-symmetric reduced flow (state h, z_DT, z_CT; K = 2, M = 34,
    p_d = p_c = 0.05, D = C = 10 as in `examples/scan_snap_predictions.py`): `flows.solve_batch` over the
    rates vs a loop of cached `flows.solve` calls."""
    eY, eZ = sweep_pairs(n)
    fixed = dict(M=34.0, K=2.0, p_d=0.05, p_c=0.05, D=10.0, C=10.0)
    bargs = {k: np.full(n, v) for k, v in fixed.items()} | {"eta_Y": eY, "eta_Z": eZ}
    kw = dict(t1=float(ts[-1]), ts=np.asarray(ts), rtol=1e-8, atol=1e-10)
    y0 = np.zeros(3)
    one = [{k: np.asarray(v[i]) for k, v in bargs.items()} for i in range(n)]

    def loop():
        return [np.asarray(solve(symmetric_vector_field, y0, args=a, **kw).ys[-1]) for a in one]

    params = {"flow": "class-symmetric reduced (generated)", "n": n, "t1": float(ts[-1]), "solver": "tsit5"}
    return _sweep_rows(
        "sweep_symmetric",
        params,
        batch=lambda: solve_batch(symmetric_vector_field, y0, args=bargs, **kw),
        loop=loop,
        final=lambda ys, saved: np.asarray(ys)[:, -1] if saved else np.asarray(ys),
        field=symmetric_vector_field,
        y0=y0,
        bargs=bargs,
        ts=ts,
        target=50,
        repeats=repeats,
        loop_repeats=loop_repeats,
    )


# --------------------------------------------------------------------------- the Adam ODE vs Adam training
ADAM_C1, ADAM_C2, ADAM_T, ADAM_SAVES = 1.0, 0.01, 20.0, 20

_ADAM_ODE_CHILD = """
import json, time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from flows.scan_snap import solve_flow, syn_small
t_import = time.perf_counter() - t0
t = time.perf_counter()
tr = solve_flow(syn_small(), 1.0, 1.0, np.linspace(0.0, {t1!r}, {n!r}), optimizer="adam",
                optim_args={{"c1": {c1!r}, "c2": {c2!r}, "eps": 1e-8}}, rtol=1e-9, atol=1e-11)
np.asarray(tr.observables["attention"])
call_s = time.perf_counter() - t
print(json.dumps({{"import_s": t_import, "call_s": call_s, "compile_s": tr.compile_s, "run_s": tr.run_s,
                  "steps": int(tr.num_steps)}}))
"""

_ADAM_TRAIN_CHILD = """
import json, time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import optax
from flows import optim_limits
from flows.scan_snap import syn_small
from flows.scan_snap.flow import flow_args, population_loss
t_import = time.perf_counter() - t0
t = time.perf_counter()
classes = syn_small()
M, L = classes.vocab_size, len(classes.query_tokens)
lr = {lr!r}
one = lambda: optax.adam(lr, b1=1.0 - {c1!r} * lr, b2=1.0 - {c2!r} * lr, eps=1e-8)
opt = optax.multi_transform({{"Y": one(), "Z": one()}}, {{"Y": "Y", "Z": "Z"}})
d = optim_limits.run_optax(population_loss, {{"Y": np.zeros((M, M)), "Z": np.zeros((L, M))}},
                           flow_args(classes, 1.0, 1.0, query_rows=True), opt, {steps!r}, {every!r})
np.asarray(d["params"]["Z"])
call_s = time.perf_counter() - t
print(json.dumps({{"import_s": t_import, "call_s": call_s}}))
"""


def _adam_make(hyper):
    """optax Adam per group at lr = hyper["lr"], b = 1 - c lr (one program for every lr, via run_optax)."""
    import optax

    lr = hyper["lr"]
    one = lambda: optax.adam(lr, b1=1.0 - ADAM_C1 * lr, b2=1.0 - ADAM_C2 * lr, eps=1e-8)  # noqa: E731
    return optax.multi_transform({"Y": one(), "Z": one()}, {"Y": "Y", "Z": "Z"})


def _adam_bare_diffrax_s(classes, options: dict, ts: np.ndarray, repeats: int) -> tuple[float, np.ndarray]:
    """The best peer of the Adam ODE solve: `jax.jit` of a bare `diffrax.diffeqsolve` (Tsit5, PID at rtol 1e-9,
    atol 1e-11, saved at `ts`; no flows) of the limit `solve_flow(..., optimizer="adam")` integrates
    (`flows.driver.limit_problem`: the same field, args and start): (best of `repeats` after compile, its
    final Z)."""
    from flows import driver
    from flows.scan_snap.spec import system

    limit, args, params = driver.limit_problem(system(classes, 1.0, 1.0), "adam", dict(options))
    y0 = limit.initial_state(params)
    solve = sweeps.bare_solve(limit.vector_field, solver="tsit5", rtol=1e-9, atol=1e-11, t1=float(ts[-1]), ts=ts,
                              max_steps=1_000_000)  # fmt: skip
    fn = jax.jit(lambda y0, args: solve(y0, args).ys)
    ys = jax.block_until_ready(fn(y0, args))
    return best_of(lambda: fn(y0, args), repeats), np.asarray(limit.params(ys)["Z"][-1])


def adam_ode(lrs=(0.1, 0.025), repeats: int = 3, t1: float = ADAM_T, n: int = ADAM_SAVES) -> list[dict]:
    """The Adam ODE against optax Adam to the same horizon t1 (see the module docstring)."""
    import jax.numpy as jnp

    from flows import optim_limits
    from flows.scan_snap import observables as obs
    from flows.scan_snap.flow import flow_args, population_loss

    classes = syn_small()
    M, L = classes.vocab_size, len(classes.query_tokens)
    batch = flow_args(classes, 1.0, 1.0, query_rows=True)
    fine = 5
    ts = np.linspace(0.0, t1, fine * n + 1)
    options = {"c1": ADAM_C1, "c2": ADAM_C2, "eps": 1e-8}
    solve_it = lambda: solve_flow(
        classes,
        1.0,
        1.0,
        ts,
        optimizer="adam",
        optim_args=options,  # noqa: E731
        rtol=1e-9,
        atol=1e-11,
    )
    begin = time.perf_counter()
    tr = solve_it()  # a Trajectory of numpy arrays: complete on return
    ode_first_s = time.perf_counter() - begin
    ode_s = best_of(lambda: solve_it().ys["Z"], repeats)
    bare_s, bare_Z = _adam_bare_diffrax_s(classes, options, ts, repeats)
    of_peer = "jax.jit of a bare diffeqsolve of the same Adam ODE (tsit5, same tolerances and saves)"
    peer = versus(ode_s, bare_s, of_peer, kind="peer")
    fresh_ode = fresh_process(_ADAM_ODE_CHILD.format(t1=t1, n=fine * n + 1, c1=ADAM_C1, c2=ADAM_C2))
    attention = jax.vmap(lambda z: obs.attention(z, batch["cond"], batch["Q"]))
    c_ode = np.asarray(tr.observables["attention"])[::fine]
    move = float(np.max(np.abs(c_ode - c_ode[0])))
    params = {
        "classes": "syn_small",
        "loss": "population (T -> inf), full batch",
        "t1": t1,
        "c1": ADAM_C1,
        "c2": ADAM_C2,
        "ode_saves": fine * n + 1,
        "train_saves": n + 1,
        "solver": "tsit5",
        "rtol": 1e-9,
        "atol": 1e-11,
    }
    rows = [
        row(
            f"scan_snap/adam_ode(t={t1:g})",
            params=params,
            compile_s=tr.compile_s,
            run_s_min=ode_s,
            repeats=repeats,
            steps=int(tr.num_steps),
            first_call_in_process_s=ode_first_s,
            solve_run_s=tr.run_s,
            bare_diffrax_run_s=bare_s,
            bare_diffrax_error=float(np.max(np.abs(bare_Z - np.asarray(tr.ys["Z"][-1])[list(classes.query_tokens)]))),
            floor=peer,
            first_call_s=fresh_ode["wall_s"],
            fresh_call_s=fresh_ode["call_s"],
            fresh_import_s=fresh_ode["import_s"],
        )
    ]
    theta0 = {"Y": np.zeros((M, M)), "Z": np.zeros((L, M))}
    for lr in lrs:
        steps = round(t1 / lr)
        train = functools.partial(
            optim_limits.run_optax, population_loss, theta0, batch, _adam_make, steps, steps // n, hyper={"lr": lr}
        )
        begin = time.perf_counter()
        d = jax.block_until_ready(train())
        train_first_s = time.perf_counter() - begin  # the first lr compiles; the next reuse its program
        train_s = best_of(lambda t=train: t()["params"]["Z"], repeats)
        fresh = fresh_process(_ADAM_TRAIN_CHILD.format(lr=lr, c1=ADAM_C1, c2=ADAM_C2, steps=steps, every=steps // n))
        c_net = np.asarray(attention(jnp.asarray(d["params"]["Z"])))
        err = float(np.max(np.abs(c_net - c_ode)) / move)
        p = {**params, "lr": lr, "steps": steps}
        rows += [
            row(
                f"scan_snap/adam_train(lr={lr:g},steps={steps})",
                params=p,
                compile_s=max(train_first_s - train_s, 0.0),
                run_s_min=train_s,
                repeats=repeats,
                steps=steps,
                error=err,
                first_call_in_process_s=train_first_s,
                first_call_s=fresh["wall_s"],
                fresh_call_s=fresh["call_s"],
                fresh_import_s=fresh["import_s"],
            ),
            row(
                f"scan_snap/adam_ode_ratio(lr={lr:g})",
                params=p,
                compile_s=None,
                run_s_min=None,
                error=err,
                first_call_ratio=fresh["wall_s"] / fresh_ode["wall_s"],
                first_call_ratio_of="Adam training first call / Adam ODE first call (fresh processes)",
                ratio=ratio(train_s / ode_s, f"optax Adam to t = {t1:g} ({steps} steps) / Adam ODE, after compile"),
                floor=peer,
            ),
        ]
    return rows


# --------------------------------------------------------------------------- entry point
def run(quick: bool) -> list[dict]:
    rows = []
    for name, part in (
        ("sweep", lambda: sweep(256, repeats=2 if quick else 3)),
        ("sweep_symmetric", lambda: sweep_symmetric(256, repeats=2 if quick else 3)),
        ("scaling", lambda: scaling(quick)),
        ("compile", vector_field_compile),
        ("first_call_quick", lambda: first_call(30, target=2)),
        ("first_call_fig4", None if quick else (lambda: first_call(100, target=10))),
        ("fig6", lambda: fig6_sweep(quick)),
        ("adam_ode", lambda: adam_ode(repeats=2 if quick else 3)),
    ):
        if part is None:
            continue
        begin = time.perf_counter()
        rows += part()
        print(f"# {name}: {time.perf_counter() - begin:.1f} s", file=sys.stderr, flush=True)
    return rows


def main(argv=None) -> int:
    return bench_main("scan_snap", run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
