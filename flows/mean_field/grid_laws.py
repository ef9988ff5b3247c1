"""Laws on the grids of `flows.mean_field.grid` and their particle twins: Gaussian initial laws as cell masses
and as samples (one law, restricted to the box), the Ornstein-Uhlenbeck closed form of the flow with the data
term switched off (`zero_data`), and the W2 distance between a particle cloud and a grid law (POT, exact).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from scipy import special, stats
from scipy.spatial.distance import cdist

from .._optional import require
from .data import Config, Prompts
from .grid import Box

__all__ = ["gaussian_masses", "grid_w2", "ou_moments", "sample_gaussian", "zero_data"]


def gaussian_masses(box: Box, mean: ArrayLike, std: ArrayLike) -> np.ndarray:
    """The cell masses of N(mean, diag(std^2)) restricted to the box and normalised (exact cell integrals by
    erf): the law that `sample_gaussian` draws from."""
    mean, std = np.broadcast_to(mean, (box.dim,)).astype(float), np.broadcast_to(std, (box.dim,)).astype(float)
    out = np.ones(())
    for k in range(box.dim):
        cdf = special.ndtr((box.edges(k) - mean[k]) / std[k])
        out = np.multiply.outer(out, np.diff(cdf))
    return out / out.sum()


def sample_gaussian(
    box: Box, mean: ArrayLike, std: ArrayLike, shape: tuple[int, ...], rng: np.random.Generator | int | None
) -> np.ndarray:
    """`shape + (p,)` i.i.d. draws of N(mean, diag(std^2)) conditioned on the box (a product of truncated
    normals; `rng` a numpy Generator or seed)."""
    rng = np.random.default_rng(rng)
    mean, std = np.broadcast_to(mean, (box.dim,)).astype(float), np.broadcast_to(std, (box.dim,)).astype(float)
    cols = []
    for k in range(box.dim):
        a, b = (box.lower[k] - mean[k]) / std[k], (box.upper[k] - mean[k]) / std[k]
        cols.append(stats.truncnorm.rvs(a, b, loc=mean[k], scale=std[k], size=shape, random_state=rng))
    return np.stack(cols, -1)


def ou_moments(
    mean0: ArrayLike, var0: ArrayLike, lam: float, temperature: float, tau: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(mean, variance) at `tau` of the OU law d c = -lam c dtau + sqrt(2 T) dB from (mean0, var0)."""
    tau = np.asarray(tau, float)
    decay = np.exp(-lam * tau)
    stationary = temperature / lam if lam > 0 else 0.0
    var = stationary + (np.asarray(var0, float) - stationary) * decay**2 if lam > 0 else var0 + 2 * temperature * tau
    return np.asarray(mean0, float) * decay, np.asarray(var, float)


def zero_data(config: Config, n: int = 1) -> Prompts:
    """`n` zero prompts (Z0 = 0, y = 0): the data term of the first variation vanishes (module docstring)."""
    return Prompts(jnp.zeros((n, config.D, config.N + 1)), jnp.zeros((n,)))


def grid_w2(cloud: np.ndarray, box: Box, masses: np.ndarray) -> float:
    """W2 between a particle cloud (M, p) (equal weights) and the grid law of one slice (cell masses at the
    cell centres, normalised), exact by POT's `ot.emd2`."""
    ot = require("ot", "ot", purpose="grid_w2")
    m = np.asarray(masses, float).ravel()
    keep = m > 0
    centres = box.centres()[keep]
    b = m[keep] / m[keep].sum()
    x = np.asarray(cloud, float).reshape(-1, box.dim)
    a = np.full(x.shape[0], 1.0 / x.shape[0])
    return float(np.sqrt(max(ot.emd2(a, b, cdist(x, centres, "sqeuclidean"), numItermax=2_000_000), 0.0)))
