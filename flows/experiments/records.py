"""Run records: one folder per example run (``metrics.json``, ``series.npz``, PNG figures, ``meta.json``),
written atomically; ``meta.json`` is written last and its ``"complete": true`` alone marks a finished record
(:func:`is_complete`). Non-finite floats are stored as the strings ``"nan"``, ``"inf"``, ``"-inf"``."""

from __future__ import annotations

import datetime as _dt
import functools
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._checks import check_real
from .atomic import (
    PathLike,
    atomic_savez,
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    decode_nonfinite,
    dumps,
    to_builtin,
)
from .examples import FAILS, HOLDS, KNOWN, NOT_TESTED, check_name, example_parser, verdict, verdict_counts, verdict_tag
from .findings import Finding
from .provenance import versions

# the writers, the example parser and the verdicts are re-exported: this is the module every example imports
__all__ = [
    "FAILS",
    "HOLDS",
    "KNOWN",
    "NOT_TESTED",
    "RunRecord",
    "atomic_savez",
    "atomic_write_json",
    "atomic_write_text",
    "example_parser",
    "is_complete",
    "load_record",
    "log_predictions",
    "verdict",
    "verdict_counts",
    "verdict_tag",
    "versions",
]

logger = logging.getLogger(__name__)

#: the fields `RunRecord.add_prediction` writes itself (its ``extra`` fields take other names)
_RESERVED = frozenset({"measured", "expected", "holds", "verdict", "known_finding", "tested_at"})

METRICS_FILE = "metrics.json"
SERIES_FILE = "series.npz"
META_FILE = "meta.json"


# --------------------------------------------------------------------------- reading


def _read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def is_complete(out_dir: PathLike) -> bool:
    """True when ``out_dir/meta.json`` exists, parses, and has ``"complete": true``."""
    try:
        meta = _read_json(Path(out_dir) / META_FILE)
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("complete") is True


def load_record(out_dir: PathLike) -> dict:
    """Read a record folder: ``{"metrics", "meta", "series", "figures"}``.

    Missing files give empty values (``{}``, ``[]``); use :func:`is_complete` to know whether
    the record is finished.  ``"nan"``/``"inf"``/``"-inf"`` strings in the metrics come back as
    floats.  ``figures`` is the sorted list of PNG names (from ``meta.json`` when present,
    else the PNG files in the folder).
    """
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise ValueError(f"out_dir {str(out_dir)!r} is not a directory")
    metrics_path, meta_path, series_path = (out_dir / n for n in (METRICS_FILE, META_FILE, SERIES_FILE))
    metrics = decode_nonfinite(_read_json(metrics_path)) if metrics_path.exists() else {}
    meta = _read_json(meta_path) if meta_path.exists() else {}
    series = {}
    if series_path.exists():
        with np.load(series_path, allow_pickle=False) as data:
            series = {k: data[k] for k in data.files}
    if isinstance(meta, dict) and isinstance(meta.get("figures"), list):
        figures = sorted(meta["figures"])
    else:
        figures = sorted(p.name for p in out_dir.glob("*.png") if not p.name.startswith("."))
    return {"metrics": metrics, "meta": meta, "series": series, "figures": figures}


# --------------------------------------------------------------------------- writing


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


class RunRecord:
    """Collects metrics, predictions, series, figures and metadata of one run; see module doc.

    Use as a context manager: ``finish()`` runs on normal exit; on an exception nothing more
    is written (the record stays incomplete) and the exception propagates::

        with RunRecord(out, name="decoder", config=cfg, seed=0, quick=args.quick) as rec:
            rec.add_prediction("slope", s, expected="-1 +/- 0.05", holds=abs(s + 1) < 0.05)
            rec.save_figure(fig, "loss.png")
    """

    def __init__(self, out_dir: PathLike, *, name: str, config: dict, seed: int | None = None, quick: bool = False):
        self.name = check_name(name)
        if not isinstance(config, Mapping):
            raise ValueError(f"config must be a dict, got {type(config).__name__}")
        try:
            self.config = json.loads(dumps(dict(config)))
        except (TypeError, ValueError) as err:
            raise ValueError(f"config is not JSON-serialisable: {err}") from err
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise ValueError(f"seed must be an int or None, got {seed!r}")
        self.seed = None if seed is None else int(seed)
        self.quick = bool(quick)
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._clear_previous()
        self._metrics: dict = {}
        self._prediction_names: set[str] = set()
        self._series: dict[str, np.ndarray] = {}
        self._solver: dict = {}
        self._timings: dict = {}
        self._figures: list[str] = []
        self._started = _now()
        self._t0 = time.perf_counter()
        self._finished = False

    def _clear_previous(self) -> None:
        """Remove an old record's files, meta.json first (so it is incomplete from now on)."""
        meta_path = self.out_dir / META_FILE
        old_figures = []
        if meta_path.exists():
            try:
                old = _read_json(meta_path)
                old_figures = [f for f in old.get("figures", []) if isinstance(f, str)]
            except (OSError, ValueError, AttributeError):
                pass
            meta_path.unlink()
            logger.info("removed old %s in %s", META_FILE, self.out_dir)
        for fname in [METRICS_FILE, SERIES_FILE, *old_figures]:
            if Path(fname).name == fname:  # never follow paths out of the folder
                (self.out_dir / fname).unlink(missing_ok=True)

    # -- adding content ---------------------------------------------------------------
    def _set(self, name: str, value, *, prediction: bool) -> None:
        check_name(name)
        if name in self._metrics and (name in self._prediction_names) != prediction:
            kind = "prediction" if prediction else "metric"
            raise ValueError(f"name {name!r} is already used; cannot reuse it for a {kind}")
        self._metrics[name] = value
        if prediction:
            self._prediction_names.add(name)
        self._finished = False

    def add_metric(self, name: str, value: Any) -> None:
        """Record a scalar metric (float, int, bool, str or None; numpy/jax 0-d values ok), or a short flat
        list of numbers (at most 8: an interval, a pair of exponents); longer arrays go to `add_series`."""
        try:
            value = to_builtin(value)
        except TypeError as err:
            raise ValueError(f"value of metric {name!r}: {err}") from err
        if isinstance(value, dict) or (
            isinstance(value, list)
            and (len(value) > 8 or not all(isinstance(v, (int, float)) or v is None for v in value))
        ):
            raise ValueError(
                f"value of metric {name!r} must be a scalar or a flat list of at most 8 numbers; use add_series"
            )
        self._set(name, value, prediction=False)

    def add_prediction(
        self,
        name: str,
        measured: Any,
        expected: str,
        holds: bool | None,
        *,
        tested_at: str | None = None,
        known_finding: Finding | None = None,
        **extra: Any,
    ) -> None:
        """Record a checked prediction: what was measured (scalar or array), what was expected, its verdict
        (:func:`verdict`): ``holds`` True, False (fails; a known finding with ``known_finding``, the
        `findings.Finding` whose note is appended to ``expected``) or None (not tested at this size, ``tested_at``
        says where it is). ``extra`` (e.g. a tolerance) is stored alongside."""
        if not isinstance(expected, str):
            raise ValueError(f"expected must be a str describing the prediction, got {expected!r}")
        clash = sorted(k for k in extra if k in _RESERVED or k.startswith("holds"))
        if clash:
            raise ValueError(
                f"extra fields {clash} of prediction {name!r}: a prediction has one verdict (holds, with tested_at "
                "when this size does not decide it); record what was measured under other names"
            )
        if known_finding is not None and not isinstance(known_finding, Finding):
            raise ValueError(
                f"known_finding must be a flows.experiments.findings.Finding or None, got {known_finding!r}"
            )
        if holds is None:
            if not isinstance(tested_at, str) or not tested_at:
                raise ValueError("tested_at must name the size at which an untested prediction is tested (holds=None)")
            verdict_ = NOT_TESTED
        else:
            holds_arr = np.asarray(holds)
            if holds_arr.size != 1 or holds_arr.dtype != bool:  # not "no" (truthy), 0.0 or NaN
                raise ValueError(
                    f"holds must be a single truth value (True, False, a numpy or jax bool) or None, got {holds!r}"
                )
            holds = bool(holds_arr.reshape(()))
            verdict_ = HOLDS if holds else KNOWN if known_finding is not None else FAILS
        entry = {}
        for key, value in {"measured": measured, **extra}.items():
            try:
                entry[key] = to_builtin(value)
            except TypeError as err:
                raise ValueError(f"{key} of prediction {name!r}: {err}") from err
        if known_finding is not None:
            expected += known_finding.note
            entry["known_finding"] = known_finding.anchor
        entry.update(expected=expected, holds=holds, verdict=verdict_)
        if tested_at is not None:
            entry["tested_at"] = str(tested_at)
        self._set(name, entry, prediction=True)

    def add_series(self, **arrays: Any) -> None:
        """Record named arrays, saved to ``series.npz`` by :meth:`finish`."""
        for key, value in arrays.items():
            arr = np.array(value)
            if arr.dtype == object:
                raise ValueError(f"series {key!r} has dtype object; pass numeric arrays")
            self._series[key] = arr
        self._finished = False

    def add_solver_stats(self, name: str, traj: Any) -> None:
        """Store ``status, message, num_steps, compile_s, run_s`` of a solve under ``name``."""
        check_name(name)
        fields = ("status", "message", "num_steps", "compile_s", "run_s")
        get = traj.get if isinstance(traj, Mapping) else functools.partial(getattr, traj)
        stats = {}
        for field in fields:
            value = get(field, None)
            try:
                stats[field] = to_builtin(value)
            except TypeError:
                stats[field] = str(value)
        self._solver[name] = stats
        self._finished = False

    def add_timing(self, name: str, seconds: float) -> None:
        """Store a wall-clock timing (seconds, finite and >= 0) under ``meta["timings"]``."""
        check_name(name)
        seconds = check_real("seconds", seconds, low=0.0)
        self._timings[name] = seconds
        self._finished = False

    def save_figure(self, fig: Any, filename: str, dpi: int = 150) -> str:
        """Save ``fig`` as PNG ``out_dir/filename`` atomically, close it, return the path."""
        check_name(filename, "filename")
        if Path(filename).name != filename or not filename.lower().endswith(".png"):
            raise ValueError(f"filename must be a plain name ending in .png, got {filename!r}")
        path = self.out_dir / filename
        try:
            atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=dpi), suffix=".png")
        finally:
            import matplotlib.pyplot as plt

            plt.close(fig)
        if filename not in self._figures:
            self._figures.append(filename)
        self._finished = False
        return str(path)

    # -- reading back -----------------------------------------------------------------
    @property
    def predictions(self) -> dict:
        """``{name: {"measured", "expected", "holds", ...}}`` of the predictions so far."""
        return {k: dict(v) for k, v in self._metrics.items() if k in self._prediction_names}

    @property
    def all_hold(self) -> bool:
        """True when every prediction holds (vacuously true with none)."""
        return all(p["holds"] is not False for p in self.predictions.values())

    # -- finishing --------------------------------------------------------------------
    def finish(self) -> None:
        """Write metrics.json, series.npz (if any series) and, last, meta.json (complete)."""
        if self._finished:
            return
        (self.out_dir / META_FILE).unlink(missing_ok=True)  # content changed since a finish
        atomic_write_json(self.out_dir / METRICS_FILE, self._metrics)
        if self._series:
            atomic_savez(self.out_dir / SERIES_FILE, **self._series)
        meta = {
            "name": self.name,
            "config": self.config,
            "seed": self.seed,
            "quick": self.quick,
            "versions": versions(),
            "solver": self._solver,
            "timings": self._timings,
            "figures": list(self._figures),
            "started": self._started,
            "finished": _now(),
            "wall_s": time.perf_counter() - self._t0,
            "complete": True,
        }
        atomic_write_json(self.out_dir / META_FILE, meta)
        self._finished = True
        preds = self.predictions
        logger.info("record %s complete in %s: %s", self.name, self.out_dir, verdict_counts(preds))

    def __enter__(self) -> RunRecord:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        if exc_type is None:
            self.finish()
        else:
            logger.warning("run %s raised %s; record in %s left incomplete", self.name, exc_type.__name__, self.out_dir)
        return False


def log_predictions(record: RunRecord, log: logging.Logger | None = None) -> None:
    """Log one PASS/FAIL line per prediction of `record` (examples call this at the end of main)."""
    log = log or logger
    for name, pred in record.predictions.items():
        log.info("%s %s: measured %s, expected %s", verdict_tag(pred), name, pred["measured"], pred["expected"])
