"""Power-law fits with bootstrap confidence intervals (system-agnostic; numpy only), for the rates of Gao et
al. 2024, Theorem 3.1 (the gap to the mean-field limit is O(1/L) in depth and O(sqrt(log L / M)) in width).

- `power_law_fit`: ordinary least squares of log y on log x, y ~ C x^p (`slope` p, `intercept` log C).
- `joint_power_fit`: log err = c + a log M + b log L, err ~ C M^a L^b.
- `compare_models`: err ~ C g(M, L) for fixed shapes g, log C = mean(log err - log g), ranked by the RMS log
  residual.

The intervals come from B = `n_boot` least-squares refits of resamples: of whole seeds with `seeds` (a cluster
bootstrap, which respects the correlation of one seed's points), else of points; degenerate resamples are
dropped (`n_boot_used`). `interval="t"` (default) is coef +- t_{G-1} sqrt(G/(G-1)) sd_boot (G seeds; n - p and
sqrt(n/(n-p)) for points), which keeps its coverage with few seeds where the percentile interval
(`interval="percentile"`) is too narrow. See docs/systems/mean_field.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from scipy import stats

from ._checks import check_choice, check_int, check_real, forwarded_options

ArrayLike = Any  # a 1-D array or a sequence of numbers
Rng = np.random.Generator | int

__all__ = [
    "DEFAULT_MODELS",
    "FIT_OPTIONS",
    "INTERVALS",
    "JointPowerFit",
    "ModelFit",
    "PowerLawFit",
    "compare_models",
    "joint_power_fit",
    "power_law_fit",
]

#: Interval constructions: "percentile" (bootstrap percentiles) or "t" (bootstrap sd, Student quantile).
INTERVALS = ("percentile", "t")

#: The bootstrap keywords every fit takes (defined, with their defaults, by `power_law_fit`).
FIT_OPTIONS = ("seeds", "n_boot", "level", "rng", "interval")


def _theorem_shape(M, L):
    return 1.0 / L + np.sqrt(np.log1p(L) / M)


#: Default shapes g(M, L) for `compare_models`. "theorem" is Gao et al.'s Theorem 3.1 bound
#: 1/L + sqrt(log L / M) with log L replaced by log(1 + L): log L vanishes at L = 1 (the bound would then
#: be 1/L alone), log(1 + L) is positive for every L >= 1 and equals log L + O(1/L) for large L.
DEFAULT_MODELS: dict[str, Callable] = {
    "theorem: 1/L + sqrt(log(1+L)/M)": _theorem_shape,
    "sharp: (M L)^(-1/2)": lambda M, L: 1.0 / np.sqrt(M * L),
    "width: M^(-1/2)": lambda M, L: 1.0 / np.sqrt(M),
    "depth: 1/L": lambda M, L: 1.0 / L,
}


# --------------------------------------------------------------------------- validation


def _positive(name, values):
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a 1-D array of positive finite numbers: {exc}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(
            f"{name} must be finite (its log is fitted), got {int(np.sum(~np.isfinite(arr)))} non-finite value(s)"
        )
    if np.any(arr <= 0):
        raise ValueError(f"{name} must be positive (its log is fitted), got min {arr.min()!r}")
    return arr


def _same_length(named):
    lengths = {name: len(arr) for name, arr in named}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{', '.join(lengths)} must have the same length, got {lengths}")
    n = next(iter(lengths.values()))
    if n < 3:
        raise ValueError(f"{', '.join(lengths)} need at least 3 points, got {n}")
    return n


def _groups(seeds, n):
    """Integer cluster labels 0..G-1 per point (None: every point its own cluster)."""
    if seeds is None:
        return np.arange(n), n
    labels = np.asarray(seeds)
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"seeds must be a 1-D array with one label per point ({n}), got shape {labels.shape}")
    _, inverse = np.unique(labels, return_inverse=True)
    G = int(inverse.max()) + 1
    if G < 2:
        raise ValueError("seeds must hold at least 2 distinct labels (whole seeds are resampled), got 1")
    return inverse.reshape(-1), G


def _rng(rng):
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, bool) or not isinstance(rng, (int, np.integer)) or rng < 0:
        raise ValueError(f"rng must be a numpy Generator or an integer seed >= 0, got {rng!r}")
    return np.random.default_rng(int(rng))


# --------------------------------------------------------------------------- least squares


def _lstsq(X, y):
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    return coef


def _bootstrap(X, y, groups, G, n_boot, rng):
    """Weighted least squares refits: resample G clusters with replacement B times; a point's weight is the
    number of times its cluster was drawn. Returns (coefs (B', p), B') over the non-degenerate resamples."""
    draws = rng.integers(0, G, size=(n_boot, G))
    counts = np.zeros((n_boot, G))
    np.add.at(counts, (np.arange(n_boot)[:, None], draws), 1.0)
    w = counts[:, groups]  # (B, n)
    n, p = X.shape
    XtWX = (w @ (X[:, :, None] * X[:, None, :]).reshape(n, p * p)).reshape(n_boot, p, p)  # two GEMMs, no (B, n, p, p)
    XtWy = w @ (X * y[:, None])
    # scale-free rank test: singular values of the normalised normal matrix
    scale = np.sqrt(np.einsum("bjj->bj", XtWX))
    scale = np.where(scale > 0, scale, 1.0)
    normed = XtWX / (scale[:, :, None] * scale[:, None, :])
    sv = np.linalg.svd(normed, compute_uv=False)
    ok = sv[:, -1] > 1e-10 * sv[:, 0]
    coefs = np.linalg.solve(XtWX[ok], XtWy[ok][..., None])[..., 0]
    return coefs, int(ok.sum())


def _intervals(point, boot, level, interval, dof, inflation):
    """(p, 2) intervals for the p coefficients from the bootstrap replicates boot (B, p)."""
    if boot.shape[0] == 0:
        raise ValueError("every bootstrap resample was degenerate (all x equal); give more points or seeds")
    if interval == "percentile":
        q = np.quantile(boot, [(1.0 - level) / 2.0, (1.0 + level) / 2.0], axis=0)
        return q.T
    sd = boot.std(axis=0, ddof=1) if boot.shape[0] > 1 else np.zeros(boot.shape[1])
    half = stats.t.ppf((1.0 + level) / 2.0, max(dof, 1)) * inflation * sd
    return np.stack([point - half, point + half], axis=1)


def _deviation(value, ci, target):
    lo, hi = ci
    half = 0.5 * (hi - lo)
    diff = value - float(target)
    if half > 0:
        return diff / half
    return 0.0 if diff == 0 else math.copysign(math.inf, diff)


# --------------------------------------------------------------------------- results


@dataclasses.dataclass(frozen=True)
class _BootstrapSummary:
    """The fields every bootstrap fit shares (`_fit`'s last return value): `n_points`; `n_groups` (seeds
    resampled, or `n_points`); `residual_std` of the log residuals; `level`; `n_boot` (requested) and
    `n_boot_used` (non-degenerate resamples); `bootstrap` ("cluster" or "points"); `interval` ("percentile"
    or "t")."""

    n_points: int
    n_groups: int
    residual_std: float
    level: float
    n_boot: int
    n_boot_used: int
    bootstrap: str
    interval: str


@dataclasses.dataclass(frozen=True)
class PowerLawFit(_BootstrapSummary):
    """y ~ exp(intercept) x^slope by OLS in log-log space, with bootstrap intervals at `level`.

    - `slope`, `intercept` (natural log of the prefactor); `slope_ci`, `intercept_ci`: (lo, hi).
    - `n_points`; `n_groups`: seeds resampled (cluster bootstrap) or `n_points` (point bootstrap).
    - `residual_std`: sqrt(sum r^2 / (n - 2)) of the log residuals.
    - `level`, `n_boot` (requested), `n_boot_used` (non-degenerate resamples), `bootstrap`
      ("cluster" or "points"), `interval` ("percentile" or "t"); `boot_slopes`: the replicates.
    """

    slope: float
    intercept: float
    slope_ci: tuple[float, float]
    intercept_ci: tuple[float, float]
    boot_slopes: np.ndarray = dataclasses.field(repr=False, compare=False)

    @property
    def prefactor(self) -> float:
        """C = exp(intercept) of y ~ C x^slope."""
        return math.exp(self.intercept)

    def contains(self, target: float) -> bool:
        """Whether the slope interval contains `target` (e.g. -1 for the depth rate)."""
        return bool(self.slope_ci[0] <= float(target) <= self.slope_ci[1])

    def deviation(self, target: float) -> float:
        """(slope - target) in units of the interval half-width (hi - lo)/2: |dev| <= 1 roughly means
        "consistent at `level`" (exactly so for a symmetric interval); +-inf for a zero-width interval that
        misses the target."""
        return _deviation(self.slope, self.slope_ci, target)

    def predict(self, x: ArrayLike) -> np.ndarray:
        """exp(intercept) x^slope."""
        return np.exp(self.intercept) * np.asarray(x, dtype=float) ** self.slope


@dataclasses.dataclass(frozen=True)
class JointPowerFit(_BootstrapSummary):
    """err ~ exp(intercept) M^a L^b by OLS of log err on (1, log M, log L), with bootstrap intervals.

    Fields as in `PowerLawFit`, with `a`, `b`, `a_ci`, `b_ci`; `boot`: the (B', 3) replicates of
    (intercept, a, b) (e.g. for a joint region).
    """

    a: float
    b: float
    intercept: float
    a_ci: tuple[float, float]
    b_ci: tuple[float, float]
    intercept_ci: tuple[float, float]
    boot: np.ndarray = dataclasses.field(repr=False, compare=False)

    def _coef(self, which):
        if which not in ("a", "b"):
            raise ValueError(f"which must be 'a' (the M exponent) or 'b' (the L exponent), got {which!r}")
        return getattr(self, which), getattr(self, which + "_ci")

    def contains(self, target: float, which: str = "a") -> bool:
        """Whether the interval of exponent `which` ("a": M, "b": L) contains `target`."""
        _, ci = self._coef(which)
        return bool(ci[0] <= float(target) <= ci[1])

    def deviation(self, target: float, which: str = "a") -> float:
        """(exponent - target) in units of its interval half-width (see `PowerLawFit.deviation`)."""
        value, ci = self._coef(which)
        return _deviation(value, ci, target)

    def predict(self, M: ArrayLike, L: ArrayLike) -> np.ndarray:
        """exp(intercept) M^a L^b."""
        return np.exp(self.intercept) * np.asarray(M, dtype=float) ** self.a * np.asarray(L, dtype=float) ** self.b


@dataclasses.dataclass(frozen=True)
class ModelFit:
    """err ~ C g(M, L) for one shape g: `C` = exp(mean(log err - log g)), `rms_log_residual`
    = sqrt(mean((log err - log C - log g)^2)), `max_log_residual` the largest |residual|."""

    name: str
    C: float
    rms_log_residual: float
    max_log_residual: float
    n_points: int


# --------------------------------------------------------------------------- fits


def _fit(X, logy, *, seeds, n_boot, level, rng, interval):
    """OLS of `logy` on `X` with bootstrap intervals: (coefficients, intervals, replicates, the fields every fit
    result shares)."""
    level = check_real("level", level, low=0.0, strict=True, high=1.0, high_strict=True)
    n_boot, interval = check_int("n_boot", n_boot, 1), check_choice("interval", interval, INTERVALS)
    n, p = X.shape
    groups, G = _groups(seeds, n)
    coef = _lstsq(X, logy)
    resid = logy - X @ coef
    residual_std = float(np.sqrt(resid @ resid / (n - p))) if n > p else 0.0
    boot, used = _bootstrap(X, logy, groups, G, n_boot, _rng(rng))
    if G < n:  # cluster bootstrap: G - 1 degrees of freedom, variance bias (G - 1)/G
        dof, inflation = G - 1, math.sqrt(G / (G - 1))
    else:  # point bootstrap: n - p degrees of freedom, HC1-like inflation
        dof, inflation = max(n - p, 1), math.sqrt(n / max(n - p, 1))
    ci = _intervals(coef, boot, level, interval, dof, inflation)
    bootstrap = "points" if seeds is None else "cluster"
    shared = dict(n_points=n, n_groups=G, residual_std=residual_std, level=level, n_boot=n_boot, n_boot_used=used)
    return coef, ci, boot, dict(shared, bootstrap=bootstrap, interval=interval)


def power_law_fit(
    x: ArrayLike,
    y: ArrayLike,
    *,
    seeds: ArrayLike | None = None,
    n_boot: int = 2000,
    level: float = 0.95,
    rng: Rng = 0,
    interval: str = "t",
) -> PowerLawFit:
    """Fit y ~ C x^slope: OLS of log y on log x, with a bootstrap interval (module docstring).

    **Arguments:**

    - `x`, `y`: 1-D arrays of positive finite numbers, the same length n >= 3, with >= 2 distinct x.
    - `seeds`: optional group label per point (e.g. the seed index); whole seeds are then resampled
      (cluster bootstrap, >= 2 seeds); `None` resamples points.
    - `n_boot`: bootstrap resamples (>= 1); `level`: interval level in (0, 1); `rng`: a numpy Generator
      or an integer seed (the fit is deterministic for a given integer); `interval`: "t" (default) or
      "percentile" (module docstring).

    **Returns:** `PowerLawFit`. **Raises:** `ValueError` naming the offending argument.
    """
    x, y = _positive("x", x), _positive("y", y)
    n = _same_length([("x", x), ("y", y)])
    if np.unique(x).size < 2:
        raise ValueError("x must hold at least 2 distinct values (a slope needs them)")
    X = np.stack([np.ones(n), np.log(x)], axis=1)
    coef, ci, boot, shared = _fit(X, np.log(y), seeds=seeds, n_boot=n_boot, level=level, rng=rng, interval=interval)
    return PowerLawFit(
        slope=float(coef[1]),
        intercept=float(coef[0]),
        slope_ci=(float(ci[1, 0]), float(ci[1, 1])),
        intercept_ci=(float(ci[0, 0]), float(ci[0, 1])),
        **shared,
        boot_slopes=boot[:, 1],
    )


def joint_power_fit(M: ArrayLike, L: ArrayLike, err: ArrayLike, **options: Any) -> JointPowerFit:
    """Fit err ~ C M^a L^b: OLS of log err on (1, log M, log L), with bootstrap intervals.

    Compare `a` with -1/2 (width rate) and `b` with -1 (depth rate, where the depth error dominates) or 0
    (where the width term sqrt(log L / M) dominates: its local L exponent is 1/(2 log L), small). M, L and
    err need >= 4 points and (log M, log L) must not be collinear (both must vary, not in lockstep).
    `options`: the bootstrap keywords of `power_law_fit` (`FIT_OPTIONS`: `seeds`, `n_boot`, `level`, `rng`,
    `interval`), with its defaults and meanings; an unknown one is a `TypeError` naming it.

    **Returns:** `JointPowerFit`. **Raises:** `ValueError` naming the offending argument.
    """
    options = forwarded_options("joint_power_fit", options, power_law_fit, FIT_OPTIONS)
    M, L, err = _positive("M", M), _positive("L", L), _positive("err", err)
    n = _same_length([("M", M), ("L", L), ("err", err)])
    if n < 4:
        raise ValueError(f"M, L, err need at least 4 points for a 3-parameter fit, got {n}")
    for name, arr in (("M", M), ("L", L)):
        if np.unique(arr).size < 2:
            raise ValueError(f"{name} must hold at least 2 distinct values")
    X = np.stack([np.ones(n), np.log(M), np.log(L)], axis=1)
    if np.linalg.matrix_rank(X) < 3:
        raise ValueError("M, L: log M and log L are collinear (they vary in lockstep); a and b are not identified")
    coef, ci, boot, shared = _fit(X, np.log(err), **options)
    return JointPowerFit(
        a=float(coef[1]),
        b=float(coef[2]),
        intercept=float(coef[0]),
        a_ci=(float(ci[1, 0]), float(ci[1, 1])),
        b_ci=(float(ci[2, 0]), float(ci[2, 1])),
        intercept_ci=(float(ci[0, 0]), float(ci[0, 1])),
        **shared,
        boot=boot,
    )


def compare_models(
    M: ArrayLike, L: ArrayLike, err: ArrayLike, models: Mapping[str, Callable] | None = None
) -> list[ModelFit]:
    """Fit err ~ C g(M, L) for each shape g in `models` and rank them by RMS log residual (best first).

    For each g the one constant is the least-squares fit in log space, log C = mean(log err - log g), and
    the score is the RMS of log err - log C - log g (a scale-free misfit; 0 for an exact model).

    **Arguments:** `M`, `L`, `err`: positive finite 1-D arrays of one length >= 3; `models`: name -> g, g
    vectorised over float arrays M, L and returning positive finite values (default `DEFAULT_MODELS`: the
    theorem's 1/L + sqrt(log(1 + L)/M) (log(1 + L), not log L, so that L = 1 is allowed), the sharper
    (M L)^(-1/2), M^(-1/2) and 1/L).

    **Returns:** a list of `ModelFit`, sorted by `rms_log_residual`. **Raises:** `ValueError` naming the
    offending argument (or `models[name]` for a shape returning bad values).
    """
    M, L, err = _positive("M", M), _positive("L", L), _positive("err", err)
    n = _same_length([("M", M), ("L", L), ("err", err)])
    models = DEFAULT_MODELS if models is None else models
    if not isinstance(models, Mapping) or len(models) == 0:
        raise ValueError("models must be a non-empty mapping name -> g(M, L)")
    logerr = np.log(err)
    out = []
    for name, g in models.items():
        if not callable(g):
            raise ValueError(f"models[{name!r}] must be callable g(M, L), got {type(g).__name__}")
        values = np.broadcast_to(np.asarray(g(M, L), dtype=float), (n,))
        if not np.all(np.isfinite(values)) or np.any(values <= 0):
            raise ValueError(f"models[{name!r}] must return positive finite values on the data")
        r = logerr - np.log(values)
        logC = r.mean()
        r = r - logC
        out.append(
            ModelFit(
                name=str(name),
                C=float(np.exp(logC)),
                rms_log_residual=float(np.sqrt(np.mean(r * r))),
                max_log_residual=float(np.abs(r).max()),
                n_points=n,
            )
        )
    return sorted(out, key=lambda m: m.rms_log_residual)
