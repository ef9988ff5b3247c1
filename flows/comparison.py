"""`compare`: the network of a spec (`flows.System`) trained at several learning rates beside its limit, on one
clock, with the gap per learning rate, its fitted order in lr, the standard figure and a run record.

At learning rate lr the network saved at step k sits at the flow's time t = lr * k (`flows.training.flow_time`;
t = lr * k / (1 - beta) for heavy ball). Gradient descent, heavy ball at a fixed beta and Adam at fixed
c = (1 - b) / lr approach their limits at first order in lr: the gap max_t |network(t) - flow(t)| ~ C lr
(the local error of one Euler step is O(lr^2), summed over t / lr steps); minibatch SGD's single path is
within O(sqrt(lr)) of the gradient flow (the SGD SDE's noise, sqrt(lr c / B) per unit time).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._checks import check_choice, check_int, check_real, real_array
from .driver import solve_flow, train
from .system import System
from .trajectory import Trajectory

logger = logging.getLogger(__name__)

__all__ = ["Comparison", "compare"]

#: the optimisers `compare` trains, and the limit each approaches as lr -> 0.
LIMIT_OF = {"gd": "gd", "sgd": "gd", "momentum": "gd", "adam": "adam"}
#: the largest number of entries of an observable drawn in `Comparison.figure` (larger ones are skipped).
MAX_DRAWN = 8


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The result of `compare`.

    - `system` (its name), `optimizer`, `lrs` (n,), `t_end`, `optim_args`, `seed`.
    - `records`: the `NetworkRecord` of each learning rate; `flow`: the `Trajectory` of the limit, saved at
      every time any record saved.
    - `aligned`: per learning rate, observable -> the flow's values at that record's times.
    - `gaps`: observable -> (n,) max over the saved times and the entries of |network - flow|.
    - `orders`: observable -> the `flows.fitting.PowerLawFit` of gap ~ C lr^order (`None` with fewer than three
      learning rates or a zero or non-finite gap).
    - `expected_order`, `tolerance`: the verdict of an observable holds when the order's interval, widened by
      `tolerance` on each side, contains `expected_order`.
    - `predictions`: the system's `predictions(flow)`.
    """

    system: str
    optimizer: str
    lrs: np.ndarray
    t_end: float
    optim_args: dict
    seed: int | None
    records: tuple
    flow: Trajectory
    aligned: tuple
    gaps: dict
    orders: dict
    expected_order: float
    tolerance: float
    predictions: dict

    @property
    def observables(self) -> tuple[str, ...]:
        """The compared observables, in the records' order."""
        return tuple(self.gaps)

    @property
    def verdicts(self) -> dict:
        """observable -> True / False (the order against `expected_order`), or None (not fitted)."""
        out: dict[str, bool | None] = {}
        for name, fit in self.orders.items():
            if fit is None:
                out[name] = None
            else:
                lo, hi = fit.slope_ci
                out[name] = bool(lo - self.tolerance <= self.expected_order <= hi + self.tolerance)
        return out

    @property
    def holds(self) -> bool:
        """Every fitted order agrees with `expected_order` (vacuously true when none was fitted)."""
        return all(v is not False for v in self.verdicts.values())

    def figure(self, observables: Sequence[str] | None = None) -> Any:
        """The standard figure: one panel per observable, the network at each learning rate solid and the flow
        dashed against t, then the gap against lr on log-log axes with the fitted power laws.

        **Arguments:** `observables`: the names to draw (default: those with at most `MAX_DRAWN` entries).

        **Returns:** the matplotlib `Figure`.
        """
        from .experiments.plotting import colors, figure

        names = self._drawn(observables)
        n = len(names) + 1
        ncols = min(n, 3)
        fig, axes = figure(math.ceil(n / ncols), ncols, squeeze=False)
        axes = axes.ravel()
        palette = colors(len(self.lrs))
        flow_ts = np.asarray(self.flow.ts)
        for ax, name in zip(axes, names, strict=False):
            for rec, color, lr in zip(self.records, palette, self.lrs, strict=True):
                values = np.asarray(rec[name]).reshape(len(rec.ts), -1)
                for j in range(values.shape[1]):
                    ax.plot(rec.ts, values[:, j], color=color, lw=1.2, label=f"lr = {lr:g}" if j == 0 else None)
            flow = np.asarray(self.flow.observables[name]).reshape(len(flow_ts), -1)
            for j in range(flow.shape[1]):
                ax.plot(flow_ts, flow[:, j], "k--", lw=1.0, label="flow" if j == 0 else None)
            ax.set_xlabel("t")
            ax.set_title(name, fontsize=9)
        axes[0].legend(fontsize=7)
        ax = axes[len(names)]
        for name in names:
            line = ax.loglog(self.lrs, self.gaps[name], "o-", ms=4, label=name)[0]
            fit = self.orders[name]
            if fit is not None:
                ax.loglog(self.lrs, fit.predict(self.lrs), ":", color=line.get_color(), label=f"order {fit.slope:.2f}")
        ax.set_xlabel("lr")
        ax.set_ylabel("max |network - flow|")
        ax.set_title(f"gap (expected order {self.expected_order:g})", fontsize=9)
        ax.legend(fontsize=7)
        for extra in axes[n:]:
            extra.set_visible(False)
        fig.suptitle(f"{self.system}: {self.optimizer} against its limit", fontsize=10)
        return fig

    def _drawn(self, observables):
        if observables is None:
            return [k for k in self.gaps if np.asarray(self.records[0][k][0]).size <= MAX_DRAWN]
        names = [observables] if isinstance(observables, str) else list(observables)
        unknown = [k for k in names if k not in self.gaps]
        if unknown:
            raise ValueError(f"observables must be among {list(self.gaps)}, got {unknown}")
        return names

    def save(self, out: str | Path, name: str | None = None) -> Path:
        """Write the run record of the comparison into the folder `out` (`flows.experiments.records`):
        `metrics.json` (per observable, the fitted order as a prediction with its verdict and interval, and the
        gaps; the system's `predictions`), `series.npz` (lrs, gaps, the flow and every record), `compare.png`
        (`figure()`) and `meta.json`. Returns the folder."""
        from .experiments.records import RunRecord

        config = {
            "system": self.system,
            "optimizer": self.optimizer,
            "lrs": [float(x) for x in self.lrs],
            "t_end": self.t_end,
            "optim_args": dict(self.optim_args),
        }
        with RunRecord(out, name=name or f"compare_{self.system}", config=config, seed=self.seed) as rec:
            for obs, fit in self.orders.items():
                expected = f"gap ~ lr^{self.expected_order:g} (order within {self.tolerance:g} of its interval)"
                if fit is None:
                    rec.add_prediction(f"order_{obs}", None, expected, None, tested_at=">= 3 learning rates, gap > 0")
                else:
                    rec.add_prediction(
                        f"order_{obs}", fit.slope, expected, self.verdicts[obs], interval=list(fit.slope_ci)
                    )
                rec.add_series(**{f"gap_{obs}": self.gaps[obs]})
            for key, pred in self.predictions.items():
                holds = pred.get("holds")
                tested_at = str(pred.get("tested_at", "another size")) if holds is None else None
                rec.add_prediction(key, pred.get("measured"), str(pred.get("expected", "")), holds, tested_at=tested_at)
            rec.add_series(lrs=self.lrs, flow_ts=np.asarray(self.flow.ts))
            for obs in self.gaps:
                rec.add_series(**{f"flow_{obs}": np.asarray(self.flow.observables[obs])})
                for i, record in enumerate(self.records):
                    rec.add_series(**{f"net{i}_{obs}": np.asarray(record[obs])})
            for i, record in enumerate(self.records):
                rec.add_series(**{f"net{i}_ts": np.asarray(record.ts)})
            rec.add_solver_stats("flow", self.flow)
            rec.save_figure(self.figure(), "compare.png")
        return Path(out)


def _check_lrs(lrs: Any) -> np.ndarray:
    arr = real_array("lrs", lrs)
    if arr.ndim != 1 or arr.size < 2 or np.any(arr <= 0) or np.unique(arr).size != arr.size:
        raise ValueError(f"lrs must be at least 2 distinct positive learning rates, got {lrs!r}")
    return arr


def _train_args(optimizer: str, optim_args: dict, lr: float) -> dict | None:
    """The `optim_args` of `train` at learning rate `lr`: heavy ball at its fixed beta, Adam at b = 1 - c lr."""
    from .optim_limits.ode import adam_betas

    if optimizer == "momentum":
        return {"beta": optim_args["beta"]}
    if optimizer == "adam":
        b1, b2 = adam_betas(lr, optim_args["c1"], optim_args["c2"])
        return {"b1": b1, "b2": b2, "eps": optim_args.get("eps", 1e-8)}
    return None


def _check_optim_args(optimizer: str, optim_args: Any) -> dict:
    from ._checks import check_options

    allowed = {"gd": (), "sgd": (), "momentum": ("beta",), "adam": ("c1", "c2", "eps")}[optimizer]
    options = dict(check_options("optim_args", optim_args, allowed, f"compare with optimizer {optimizer!r}"))
    missing = [k for k in allowed if k != "eps" and k not in options]
    if missing:
        raise ValueError(
            f"optim_args must give {missing} for compare with optimizer={optimizer!r} (heavy ball at a fixed beta; "
            "Adam at fixed c = (1 - b) / lr, whose limit is the Adam ODE)"
        )
    if "beta" in options:
        check_real("optim_args['beta']", options["beta"], low=0.0, high=1.0, high_strict=True)
    for k in ("c1", "c2", "eps"):
        if k in options:
            check_real(f"optim_args[{k!r}]", options[k], low=0.0, strict=True)
    return options


def _gap(net: np.ndarray, flow: np.ndarray) -> float:
    diff = np.abs(np.asarray(net, dtype=float) - np.asarray(flow, dtype=float))
    return float(np.max(diff)) if np.all(np.isfinite(diff)) else math.nan


def compare(
    system: System,
    lrs: Sequence[float] = (0.04, 0.02, 0.01),
    t_end: float = 1.0,
    *,
    optimizer: str = "gd",
    optim_args: dict | None = None,
    saves: int = 20,
    seed: int | None = None,
    batch_size: int | None = None,
    observables: Sequence[str] | None = None,
    expected_order: float | None = None,
    tolerance: float = 0.25,
    out: str | Path | None = None,
    **solve_options: Any,
) -> Comparison:
    """Train `system` at each learning rate up to the flow time `t_end`, solve its limit once, and hold them
    against each other (module docstring).

    **Arguments:**

    - `system`: the `flows.System`; `lrs`: at least 2 distinct positive learning rates (3 or more for a fitted
      order); `t_end` (> 0): the horizon on the flow's clock.
    - `optimizer`: `"gd"`, `"sgd"` (minibatches of `batch_size`, against the gradient flow), `"momentum"`
      (`optim_args` `{"beta"}`, fixed: against the gradient flow on the clock lr * step / (1 - beta)) or
      `"adam"` (`optim_args` `{"c1", "c2"}` and optional `"eps"`: trained with b = 1 - c lr, against the Adam
      ODE of (c1, c2)).
    - `saves` (>= 1): saved points per run, evenly spaced in steps (step 0 and the last included).
    - `seed`: as in `flows.train` (the same initial parameters and data at every lr).
    - `observables`: the names to compare (default: every observable of the records and the flow).
    - `expected_order`: the order in lr the verdict checks (default 1, and 1/2 for `"sgd"`); `tolerance`: how
      far outside the fitted interval it may lie.
    - `out`: a folder to write the run record into (`Comparison.save`); `solve_options`: `flows.solve`
      keywords of the limit's solve.

    **Returns:** a `Comparison`.

    **Raises:** `ValueError` naming a bad argument; `flows.TrainingError` or `flows.FlowError` for a failed run.
    """
    from .fitting import power_law_fit

    if not isinstance(system, System):
        raise ValueError(f"system must be a flows.System, got {type(system).__name__}")
    rates = _check_lrs(lrs)
    t_end = check_real("t_end", t_end, low=0.0, strict=True)
    optimizer = check_choice("optimizer", optimizer, tuple(LIMIT_OF))
    options = _check_optim_args(optimizer, optim_args)
    saves = check_int("saves", saves, 1)
    if optimizer == "sgd" and batch_size is None:
        raise ValueError("batch_size must be given for compare with optimizer='sgd' (use 'gd' for full batch)")
    if expected_order is None:
        expected_order = 0.5 if optimizer == "sgd" else 1.0
    expected_order = check_real("expected_order", expected_order, low=0.0, strict=True)
    tolerance = check_real("tolerance", tolerance, low=0.0)
    beta = float(options.get("beta", 0.0))

    records = []
    for lr in rates:
        steps = max(1, round(t_end * (1.0 - beta) / lr))
        saved = np.unique(np.round(np.linspace(0, steps, saves + 1)).astype(np.int64))
        records.append(
            train(
                system,
                optimizer,
                float(lr),
                steps,
                save_steps=saved,
                seed=seed,
                batch_size=batch_size,
                optim_args=_train_args(optimizer, options, float(lr)),
            )
        )
    flow_ts = np.unique(np.concatenate([rec.ts for rec in records]))
    limit = LIMIT_OF[optimizer]
    flow_args = {k: options[k] for k in ("c1", "c2", "eps") if k in options} if limit == "adam" else None
    flow = solve_flow(system, flow_ts, limit, flow_args, seed=seed, **solve_options)

    shared = [k for k in records[0].observables if k in flow.observables]
    names = shared if observables is None else ([observables] if isinstance(observables, str) else list(observables))
    unknown = [k for k in names if k not in shared]
    if unknown or not names:
        raise ValueError(
            f"observables must be among those of the network and the flow {shared}, got {unknown or names}"
        )
    aligned = []
    for rec in records:
        idx = np.searchsorted(flow_ts, rec.ts)
        aligned.append({k: np.asarray(flow.observables[k])[idx] for k in names})
    gaps = {k: np.array([_gap(rec[k], al[k]) for rec, al in zip(records, aligned, strict=True)]) for k in names}
    orders = {}
    for k, gap in gaps.items():
        fit_ok = rates.size >= 3 and np.all(np.isfinite(gap)) and np.all(gap > 0)
        orders[k] = power_law_fit(rates, gap) if fit_ok else None
    predictions = dict(system.predictions(flow)) if system.predictions is not None else {}
    for key, pred in predictions.items():
        if not isinstance(pred, dict) or not {"measured", "expected", "holds"} <= set(pred):
            raise ValueError(
                f"System.predictions must return name -> {{'measured', 'expected', 'holds'}}, got {key!r}: {pred!r}"
            )
    result = Comparison(
        system=system.name,
        optimizer=optimizer,
        lrs=rates,
        t_end=t_end,
        optim_args=options,
        seed=seed,
        records=tuple(records),
        flow=flow,
        aligned=tuple(aligned),
        gaps=gaps,
        orders=orders,
        expected_order=expected_order,
        tolerance=tolerance,
        predictions=predictions,
    )
    for k in names:
        fit = orders[k]
        logger.info("compare %s %s: gap %s, order %s", system.name, k, gaps[k], None if fit is None else fit.slope)
    if out is not None:
        result.save(out)
    return result
