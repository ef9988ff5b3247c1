"""Coupled initialisations for finite-vs-reference comparisons (common random numbers): the network's initial
particles drawn from the reference's own initial cloud, in width (`subsample_particles`: M of the reference's
M_ref particles) and in depth (`sample_depth`: the reference's depth curves at the layer depths t_l = l / L).
Particle dicts have a leading depth axis (layers or nodes). See docs/systems/mean_field.md.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import check_bool, check_choice, check_int
from .data import Particles
from .model import GROUPS

__all__ = ["LAYOUTS", "depth_weights", "sample_depth", "subsample_particles"]

#: Depth layouts of the input of `sample_depth`: "nodes" (K values at s_k = k/(K-1), the reference's
#: layout, s_{K-1} = 1) or "layers" (L_ref values at t_l = l/L_ref, a network's layout).
LAYOUTS = ("nodes", "layers")


def _check_dict(name, particles):
    """Keys V, W, W1, W2; shapes (K, M, D, D) x 2 and (K, M_mlp, D) x 2 with one K, M, M_mlp, D."""
    if not isinstance(particles, dict) or set(particles) != set(GROUPS):
        got = sorted(particles) if isinstance(particles, dict) else type(particles).__name__
        raise ValueError(f"{name} must be a dict with keys {GROUPS}, got {got}")
    arrays = {k: np.asarray(particles[k]) for k in GROUPS}  # host copies: gathers need no compilation
    V = arrays["V"]
    if V.ndim != 4 or V.shape[2] != V.shape[3]:
        raise ValueError(f"{name}['V'] must have shape (depth, M, D, D), got {V.shape}")
    K, M, D = V.shape[0], V.shape[1], V.shape[2]
    Mm = arrays["W1"].shape[1] if arrays["W1"].ndim == 3 else -1
    want = {"V": (K, M, D, D), "W": (K, M, D, D), "W1": (K, Mm, D), "W2": (K, Mm, D)}
    for k in GROUPS:
        if arrays[k].shape != want[k] or Mm < 1:
            raise ValueError(
                f"{name}[{k!r}] must have shape {want[k] if Mm >= 1 else '(depth, M_mlp, D)'} "
                f"(depth {K}, M={M}, D={D}), got {arrays[k].shape}"
            )
        if not np.issubdtype(arrays[k].dtype, np.floating):
            raise ValueError(f"{name}[{k!r}] must be floating point, got {arrays[k].dtype}")
    return arrays, K, M, Mm


def _generator(key):
    """A numpy Generator seeded by the bits of a jax PRNG key (raw uint32 or typed) or by an integer seed
    (through `jax.random.PRNGKey(seed)`): the same key gives the same subsample, and no jax program is
    compiled per shape."""
    bad = ValueError(f"key must be a jax PRNG key or an integer seed >= 0, got {key!r}")
    if isinstance(key, (bool, np.bool_)) or (isinstance(key, (int, np.integer)) and key < 0):
        raise bad
    if isinstance(key, (int, np.integer)):
        key = jax.random.PRNGKey(int(key))
    try:
        bits = np.asarray(jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key)
    except (AttributeError, TypeError) as exc:
        raise bad from exc
    if not np.issubdtype(bits.dtype, np.unsignedinteger) or bits.size == 0:
        raise bad
    return np.random.default_rng([int(v) for v in bits.ravel()])


def _indices(rng, depth, n_ref, n, per_layer, replace=False):
    """A uniform random subset of size n of range(n_ref), in random order (the first n of a uniform
    permutation; with `replace`, n i.i.d. uniform indices); one independent subset per depth slice with
    `per_layer`, shape (depth, n), else (n,)."""
    if replace:
        return rng.integers(0, n_ref, size=(depth, n) if per_layer else (n,))
    if per_layer:
        return rng.permuted(np.tile(np.arange(n_ref), (depth, 1)), axis=1)[:, :n]
    return rng.permutation(n_ref)[:n]


def _take(x, idx):
    if idx.ndim == 1:
        return np.take(x, idx, axis=1)
    return np.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)


def subsample_particles(
    particles: Particles,
    M: int,
    M_mlp: int | None = None,
    *,
    key: Any,
    per_layer: bool = False,
    replace: bool = False,
    return_indices: bool = False,
) -> Particles | tuple[Particles, dict]:
    """M attention and M_mlp MLP particles chosen from a reference cloud (without replacement by default).

    **Arguments:**

    - `particles`: a reference particle dict (`initial.init_particles` of a config with a large M, or the
      node values of `reference.init_reference`), leading depth axis of any length.
    - `M`: attention particles to keep (1 <= M <= M_ref); `M_mlp`: MLP particles (default `M`,
      1 <= M_mlp <= the reference's M_mlp). A particle is (V_j, W_j) resp. (W1_j, W2_j): V and W share the
      index set, W1 and W2 share theirs; the attention and MLP sets are drawn independently.
    - `key`: a jax PRNG key or an integer seed (same key, same subsample; the attention and MLP subsets
      come from one numpy Generator seeded by the key bits, see `_generator`).
    - `per_layer`: `False` (default): one index set for every depth slice, so a subsampled particle is a
      whole reference *curve* (needed for depth-smooth laws, `Config.init` "tied"/"smooth": curves stay
      curves); `True`: an independent index set per depth slice (for depth-independent laws, "iid").
    - `replace`: draw i.i.d. from the reference's empirical law (with replacement; M may exceed M_ref).
      Then every particle is an independent draw, so the subsample's Monte-Carlo error relative to the
      reference network is exactly of variance (1/M) Var, with no finite-population factor (1 - M/M_ref):
      the choice for width-rate fits against a finite M_ref.
    - `return_indices`: also return `{"attention": idx, "mlp": idx}`, shape (M,) resp. (M_mlp,), or
      (depth, M) resp. (depth, M_mlp) with `per_layer`: subsampled particle j of slice l is reference
      particle idx[j] (idx[l, j]) of slice l (e.g. to pair it with its reference trajectory).

    **Returns:** the subsampled dict (same depth, widths M and M_mlp, entries exactly the reference's), and
    the indices if asked. **Raises:** `ValueError` naming the field (bad keys or shapes, M > M_ref, ...).
    """
    arrays, depth, M_ref, Mm_ref = _check_dict("particles", particles)
    M = check_int("M", M, 1)
    M_mlp = M if M_mlp is None else check_int("M_mlp", M_mlp, 1)
    replace = check_bool("replace", replace)
    if M > M_ref and not replace:
        raise ValueError(f"M must be <= the reference's M_ref = {M_ref} (sampling without replacement), got {M}")
    if M_mlp > Mm_ref and not replace:
        raise ValueError(
            f"M_mlp must be <= the reference's M_mlp = {Mm_ref} (sampling without replacement), got {M_mlp}"
        )
    per_layer = check_bool("per_layer", per_layer)
    rng = _generator(key)
    idx = {"attention": _indices(rng, depth, M_ref, M, per_layer, replace)}
    idx["mlp"] = _indices(rng, depth, Mm_ref, M_mlp, per_layer, replace)
    out = {k: jnp.asarray(_take(arrays[k], idx["attention" if k in ("V", "W") else "mlp"])) for k in GROUPS}
    return (out, idx) if return_indices else out


def depth_weights(K: int, L: int, layout: str = "nodes") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(k, k_hi, u), each (L,): layer l of a depth-L network sits at t_l = l / L, between grid points k_l and
    k_hi_l = min(k_l + 1, K - 1) with weight u_l in [0, 1) (value (1 - u_l) x_{k_l} + u_l x_{k_hi_l}), computed
    in exact integer arithmetic (u = 0 exactly on a grid point).

    "nodes": grid s_k = k / (K - 1), position t_l (K - 1) = l (K - 1) / L; "layers": grid l / K (K = L_ref),
    position l K / L, which needs L <= K (no extrapolation past the last layer (K - 1)/K).
    """
    check_choice("layout", layout, LAYOUTS)
    K = check_int("K", K, 2 if layout == "nodes" else 1)
    L = check_int("L", L, 1)
    if layout == "layers" and L > K:
        raise ValueError(
            f"L must be <= the input's depth {K} for layout 'layers' (layer depths (L - 1)/L past "
            f"the last input layer {K - 1}/{K} would need extrapolation), got {L}"
        )
    scale = K - 1 if layout == "nodes" else K
    num = np.arange(L) * scale  # position l * scale / L
    k = num // L
    rem = num - k * L
    k_hi = np.minimum(k + 1, K - 1)  # k = K - 1 only with rem = 0 (t = 1 is never a layer depth)
    return k, k_hi, rem / L


def sample_depth(nodes: Particles, L: int, *, layout: str = "nodes") -> Particles:
    """The particles of a depth-L network on the input's depth curves: slice l is the curve at t_l = l / L.

    **Arguments:**

    - `nodes`: a particle dict with a leading depth axis, of `layout` "nodes" (default; K >= 2 values at
      s_k = k / (K - 1), the reference's layout, `reference.init_reference`) or "layers" (L_ref values at
      l / L_ref, a network's layout, then L <= L_ref).
    - `L`: the network's depth (>= 1).

    Between grid points the curves are linearly interpolated, as in `reference`:
    theta(t) = (1 - u) theta(s_k) + u theta(s_{k+1}), t = s_k + u (s_{k+1} - s_k). On a grid point (u = 0) the
    value is the grid value exactly; for curves linear in t (`Config.init` "smooth" or "tied") it is exact
    everywhere (to rounding).

    **Returns:** `{"V": (L, M, D, D), "W": (L, M, D, D), "W1": (L, M_mlp, D), "W2": (L, M_mlp, D)}`.
    **Raises:** `ValueError` naming the field.
    """
    arrays, K, _, _ = _check_dict("nodes", nodes)
    if layout == "nodes" and K < 2:
        raise ValueError(f"nodes must have a leading node axis of length K >= 2 for layout 'nodes', got {K}")
    k, k_hi, u = depth_weights(K, L, layout)
    out = {}
    for name in GROUPS:
        x = arrays[name]
        w = u.astype(x.dtype).reshape((-1,) + (1,) * (x.ndim - 1))
        out[name] = jnp.asarray((1.0 - w) * x[k] + w * x[k_hi])
    return out
