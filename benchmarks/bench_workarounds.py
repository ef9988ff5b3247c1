"""The library's performance workarounds, each on against off: the first call of an entry point in a fresh process.

Every workaround of `flows._xla` (its `config` fields) and the mean-field attention's hand-written reverse rule
(`flows.mean_field.model.attention_update_rev`) is timed on a realistic entry point at the examples' `--quick`
sizes: the first call (data, initial state, trace, compile, run; imports excluded, they do not depend on the
switch) in a fresh process with the compile cache off, the workaround on and off in alternating order
(on-off, off-on, ...) over `repeats` pairs in one run.

Rows `workarounds/<switch>(<entry point>)` (`benchmarks._harness.row`): `run_s_min` the fastest first call with
the workaround on, `on_s` / `off_s` the first calls of every pair, `ratio` = median(off) / median(on) (> 1:
the workaround pays) with target `TARGET`, `pair_ratios` off / on of each pair and `spread` their [min, max];
where the entry point times itself (`mean_field.train`, the SDE) also `compile_s_ratio` and `run_s_ratio` (off / on of
the medians of its compile and run). `verdict`: `"pays"` (target met and every pair faster with it),
`"noise"` (the spread covers 1: within this machine's noise, the workaround goes), `"small"` (faster in every
pair, target missed) or `"costs"` (slower in every pair). `load_average`: the machine's 1-minute load before and
after the row (the machine may be shared).

Switches: `config` fields are set in the child before the call (`flows._xla.config`); the attention rule is a
benchmark-only switch: the child points `model.attention_update_rev` at the autodiff form `attention_update`
(the same forward, `jax.grad` through it), which the network's loss then traces.

A workaround whose rows are all within the noise or cost time is removed from the library, and its switch from
this benchmark: `device_array`'s host-side conversion (`device_put`, row
`workarounds/device_put(scan_snap.solve_flow)` of the committed results) is plain `jnp.asarray` now.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass, field

from benchmarks._harness import bench_main, fresh_process, ratio, row, versus

TARGET = 1.1  # off / on: the workaround saves at least a tenth of the first call

_CHILD = """
import json, time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from flows import _xla
{imports}
for _name, _value in {settings!r}.items():
    setattr(_xla.config, _name, _value)
if {autodiff_attention!r}:
    from flows.mean_field import model as _model
    _model.attention_update_rev = _model.attention_update
import_s = time.perf_counter() - t0
extra = {{}}
t = time.perf_counter()
{call}
jax.block_until_ready(out)
call_s = time.perf_counter() - t
print(json.dumps({{"import_s": import_s, "call_s": call_s, **extra}}))
"""

_SCAN_SNAP = "from flows.scan_snap import solve_flow, syn_small, train"
_MEAN_FIELD = "from flows import mean_field as mf"

# examples/scan_snap_fig4.py --quick: SGD momentum 0.9, batch 128, T = 128, 30 steps, zero init, seed 2
_SCAN_SNAP_TRAIN = (
    'r = train(syn_small(), "sgd", lr={{"Y": 1.0, "Z": 1.0}}, T=128, batch_size=128, steps={steps}, momentum=0.9, '
    'init="zero", seed=2)\nout = np.asarray(r.Z[-1])'
)
# its flow at the same flow times (the fig4 save times of steps 0, 2, ..., 10 and the last)
_SCAN_SNAP_FLOW = (
    "ts = np.unique(np.minimum([0, 2, 4, 6, 8, 10, {steps}], {steps})) / 0.1\n"
    "out = np.asarray(solve_flow(syn_small(), 1.0, 1.0, ts).ys['Z'][-1])"
)
# examples/mean_field_gd_vs_flow.py --quick: L = 4, M = 8, 32 prompts; GD at eta_tau = 0.4 to tau = 60
_MF_CONFIG = "cfg = mf.Config(d=3, D=4, N=8, L={L}, M={M}, n_train={n}, n_test=128, lam=1e-3, init_scale=2.0, seed=0)\n"
_MF_DATA = _MF_CONFIG + "out = (mf.training_set(cfg), mf.held_out_set(cfg), mf.init_particles(cfg))"
_MF_TRAIN = (
    _MF_CONFIG + "data, test, p0 = mf.training_set(cfg), mf.held_out_set(cfg), mf.init_particles(cfg)\n"
    "r = mf.train(cfg, lr=0.4, steps={steps}, save_every={every}, particles=p0, data=data, test=test, "
    "observables={observables!r})\n"
    "out, extra = r.params, {{'compile_s': r.compile_s, 'run_s': r.run_s}}"
)

# examples/mean_field_noise.py --quick: the SEA Langevin SDE at T = 1e-2, 4 paths, its tree tolerance, to tau = 4
_MF_SDE = (
    "from flows.mean_field.noise import solve_particles_sde\n"
    "cfg = mf.Config(d=2, D=3, N=4, L=2, M={M}, n_train={n}, n_test=16, lam=1e-2, init_scale=2.0, seed=0)\n"
    "tr = solve_particles_sde(cfg, np.linspace(0.0, {tau!r}, 11), 1e-2, dt=0.1, seed=0, solver='sea', "
    "num_paths={paths}, save_states=True, tol=0.0078125, max_steps=201)\n"
    "out, extra = np.asarray(tr.observables['R']), {{'compile_s': tr.compile_s, 'run_s': tr.run_s}}"
)
# benchmarks/bench_scan_snap.py's sweep: the reduced Z-flow on Syn-Small over n (eta_Y, eta_Z) pairs
_SCAN_SNAP_SWEEP = (
    "from benchmarks.bench_scan_snap import sweep_pairs\n"
    "eY, eZ = sweep_pairs({n})\n"
    "tr = solve_flow(syn_small(), eY, eZ, (0.0, 1.0, 10.0, 30.0), reduced=True)\n"
    "out, extra = tr.ys['Z'], {{'compile_s': tr.compile_s, 'run_s': tr.run_s}}"
)
# examples/scan_snap_fig6.py's K = 20 panel (L = 10; 16 cells x 10 seeds, SGD momentum 0.9, batch 128, T = 128,
# random init) for `steps` of its 100 steps
_FIG6_K20 = (
    "import itertools\nfrom flows.scan_snap import syn_medium, train_sweep\n"
    "cells = list(itertools.product([0.5, 1.0, 2.0, 3.0], [1.0, 2.0, 5.0, 10.0]))\n"
    "eZ = np.repeat([c[0] for c in cells], {seeds}); eY = np.repeat([c[0] * c[1] for c in cells], {seeds})\n"
    "seeds = np.tile(np.arange(1, {seeds} + 1), len(cells)); parts = {{}}\n"
    "_, out = train_sweep(syn_medium({L}), 'sgd', seeds=seeds, T=128, batch_size=128, steps={steps}, momentum=0.9, "
    "init='random', lr={{'Y': eY, 'Z': eZ}}, timings=parts)\n"
    "extra = parts"
)
# benchmarks/bench_mean_field.py gd_throughput --quick: L = 4, M = 32, 64 prompts, Q and R saved only
_SIZES: dict[str, dict] = {
    "full": {
        "steps": 30,
        "L": 4,
        "M": 8,
        "n": 32,
        "mf_steps": 150,
        "every": 5,
        "gd": (4, 32, 64, 100),
        "sde": (16, 16, 10.0, 4),
        "sweep_n": 256,
        "fig6": (10, 10, 20),
        "fig6_steps": 100,  # the example's steps: the emitters' longer compile is paid back over the run
    },
    "tiny": {
        "steps": 4,
        "L": 2,
        "M": 2,
        "n": 4,
        "mf_steps": 2,
        "every": 1,
        "gd": (2, 4, 4, 2),
        "sde": (2, 4, 0.5, 2),
        "sweep_n": 4,
        "fig6": (1, 1, 2),
        "fig6_steps": 2,
    },
}


@dataclass(frozen=True)
class Workaround:
    """One workaround on one entry point: `switch` names it (a `flows._xla.config` field, or
    `"attention_vjp"`), `entry` the entry point, `call` the child's code (sets `out`)."""

    switch: str
    entry: str
    imports: str
    call: str
    reason: str
    params: dict = field(default_factory=dict)

    @property
    def bench(self) -> str:
        return f"workarounds/{self.switch}({self.entry})"

    def child(self, on: bool) -> str:
        attention = self.switch == "attention_vjp"
        settings = {} if attention else {self.switch: on}
        return _CHILD.format(
            imports=self.imports, settings=settings, autodiff_attention=attention and not on, call=self.call
        )


def workarounds(size: str = "full") -> list[Workaround]:
    """The measured workarounds at the examples' `--quick` sizes (`size="tiny"`: a few steps, for the tests)."""
    s = _SIZES[size]
    ss_train = _SCAN_SNAP_TRAIN.format(steps=s["steps"])
    mf_train = _MF_TRAIN.format(L=s["L"], M=s["M"], n=s["n"], steps=s["mf_steps"], every=s["every"], observables="all")
    gL, gM, gn, gsteps = (int(v) for v in s["gd"])
    sM, sn, stau, spaths = s["sde"]
    mf_sde = _MF_SDE.format(M=sM, n=sn, tau=float(stau), paths=spaths)
    mf_gd = _MF_TRAIN.format(L=gL, M=gM, n=gn, steps=gsteps, every=gsteps, observables="basic")
    mf_data = _MF_DATA.format(L=s["L"], M=s["M"], n=s["n"])
    ss_params = {"example": "scan_snap_fig4 --quick", "steps": s["steps"], "T": 128, "batch": 128}
    fL, fseeds, fsteps = s["fig6"]
    fig6 = _FIG6_K20.format(L=fL, seeds=fseeds, steps=fsteps)
    fig6_run = _FIG6_K20.format(L=fL, seeds=fseeds, steps=s["fig6_steps"])
    mf_params = {"example": "mean_field_gd_vs_flow --quick", "L": s["L"], "M": s["M"], "n_train": s["n"]}
    return [
        Workaround(
            "classic_emitters",
            "scan_snap.train",
            _SCAN_SNAP,
            ss_train,
            "XLA's classic CPU emitters compile the same kernels faster",
            ss_params,
        ),
        Workaround(
            "classic_emitters",
            "mean_field.train",
            _MEAN_FIELD,
            mf_train,
            "XLA's classic CPU emitters compile the same kernels faster",
            {**mf_params, "steps": s["mf_steps"], "save_every": s["every"]},
        ),
        Workaround(
            "one_shot_level0",
            "mean_field data",
            _MEAN_FIELD,
            mf_data,
            "run-once draws compile at XLA backend level 0",
            {**mf_params, "call": "training_set, held_out_set, init_particles"},
        ),
        Workaround(
            "fused_prng",
            "scan_snap.train",
            _SCAN_SNAP,
            ss_train,
            "the unrolled threefry hash compiles and runs faster than JAX's rolled loop on CPU",
            ss_params,
        ),
        Workaround(
            "fused_prng",
            "mean_field data",
            _MEAN_FIELD,
            mf_data,
            "the unrolled threefry hash compiles and runs faster than JAX's rolled loop on CPU",
            {**mf_params, "call": "training_set, held_out_set, init_particles"},
        ),
        Workaround(
            "fused_prng",
            "mean_field.solve_particles_sde",
            _MEAN_FIELD,
            mf_sde,
            "the unrolled threefry hash compiles and runs faster than JAX's rolled loop on CPU",
            {"example": "mean_field_noise --quick", "M": sM, "n_train": sn, "tau": stau, "paths": spaths},
        ),
        Workaround(
            "ynn_reduce_only",
            "scan_snap.solve_flow sweep",
            _SCAN_SNAP,
            _SCAN_SNAP_SWEEP.format(n=s["sweep_n"]),
            "a sweep's stacked small states run faster in XLA's own elementwise kernels than in YNNPACK fusions",
            {"bench": "scan_snap/sweep", "n": s["sweep_n"], "flow": "reduced", "t1": 30.0},
        ),
        Workaround(
            "ynn_reduce_only",
            "scan_snap.train_sweep, Fig. 6 K=20",
            _SCAN_SNAP,
            fig6,
            "a sweep's batched float64 products run faster in Eigen than in YNNPACK",
            {"example": "scan_snap_fig6 (its K = 20 panel)", "L": fL, "members": 16 * fseeds, "steps": fsteps},
        ),
        Workaround(
            "training_sweep_emitters",
            "scan_snap.train_sweep, Fig. 6 K=20, 100 steps",
            _SCAN_SNAP,
            fig6_run,
            "XLA's fusion emitters vectorise a training sweep's elementwise kernels (compiling longer)",
            {"example": "scan_snap_fig6 (its K = 20 panel)", "L": fL, "members": 16 * fseeds, "steps": s["fig6_steps"]},
        ),
        Workaround(
            "retain_scratch",
            "scan_snap.train_sweep, Fig. 6 K=20, 100 steps",
            _SCAN_SNAP,
            fig6_run,
            "glibc keeps the per-step scratch of XLA's worker threads instead of returning it and faulting it in again",
            {"example": "scan_snap_fig6 (its K = 20 panel)", "L": fL, "members": 16 * fseeds, "steps": s["fig6_steps"]},
        ),
        Workaround(
            "attention_vjp",
            "mean_field.train",
            _MEAN_FIELD,
            mf_train,
            "the hand-written attention VJP recomputes S instead of storing it per layer (autodiff)",
            {**mf_params, "steps": s["mf_steps"], "save_every": s["every"]},
        ),
        Workaround(
            "attention_vjp",
            "mean_field.train, throughput shape",
            _MEAN_FIELD,
            mf_gd,
            "the hand-written attention VJP recomputes S instead of storing it per layer (autodiff)",
            {"bench": "mean_field gd_throughput --quick", "L": gL, "M": gM, "n_train": gn, "steps": gsteps},
        ),
    ]


def verdict(value: float, spread: tuple[float, float], target: float = TARGET) -> str:
    """`"noise"` when the spread of the pair ratios covers 1, else `"pays"` (target met), `"small"` (faster in
    every pair, target missed) or `"costs"` (slower in every pair)."""
    low, high = spread
    if low <= 1.0 <= high:
        return "noise"
    if high < 1.0:
        return "costs"
    return "pays" if value >= target else "small"


def measure(w: Workaround, repeats: int) -> dict:
    """`repeats` pairs of fresh-process first calls, on and off in alternating order; the row. Where the entry
    point reports its own compile and run times (`mean_field.train`), their medians on and off are kept too."""
    load_before = os.getloadavg()[0]
    outs: dict[bool, list[dict]] = {True: [], False: []}
    for i in range(repeats):
        for state in (True, False) if i % 2 == 0 else (False, True):
            outs[state].append(fresh_process(w.child(state)))
    on, off = ([o["call_s"] for o in outs[s]] for s in (True, False))
    pairs = [b / a for a, b in zip(on, off, strict=True)]
    value = statistics.median(off) / statistics.median(on)
    spread = (min(pairs), max(pairs))
    parts = {
        f"{k}_{'on' if s else 'off'}_median": statistics.median(o[k] for o in outs[s])
        for k in ("compile_s", "run_s")
        if k in outs[True][0]
        for s in (True, False)
    }
    for k in ("compile_s", "run_s"):
        if f"{k}_on_median" in parts:
            parts[f"{k}_ratio"] = parts[f"{k}_off_median"] / parts[f"{k}_on_median"]
    return row(
        w.bench,
        params={**w.params, "switch": w.switch, "fresh_process": True, "x64": True},
        compile_s=parts.get("compile_s_on_median"),
        run_s_min=min(on),
        repeats=repeats,
        measure="first call (data, init, trace, compile, run) in a fresh process, imports excluded",
        reason=w.reason,
        on_s=on,
        off_s=off,
        pair_ratios=pairs,
        spread=list(spread),
        verdict=verdict(value, spread),
        load_average=[load_before, os.getloadavg()[0]],
        task="workaround",
        ratio=ratio(value, f"first call without / with {w.switch}", target=TARGET),
        floor=versus(
            statistics.median(on), statistics.median(off), f"the same first call without {w.switch}", kind="peer"
        ),
        **parts,
    )


def run(quick: bool, size: str = "full", only: tuple[str, ...] | None = None, repeats: int | None = None) -> list:
    """Every workaround's row (`only`: those whose switch is listed); `repeats` pairs (quick: 3, full: 5)."""
    repeats = repeats or (3 if quick else 5)
    rows = []
    for w in workarounds(size):
        if only is not None and w.switch not in only:
            continue
        begin = time.perf_counter()
        rows.append(measure(w, repeats))
        print(f"# {w.bench}: {time.perf_counter() - begin:.1f} s, {rows[-1]['verdict']}", file=sys.stderr, flush=True)
    return rows


def main(argv=None) -> int:
    return bench_main("workarounds", run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
