"""Closed forms of JoMA (Tian, Wang, Zhang, Chen, Du, ICLR 2024, arXiv:2310.00535): the invariants between the
attention logits and the MLP weights, the softmax estimate of the official script, the finite blow-up time of
the linear-MLP flow, and the entropies of the reduced V-flow. Equations and conventions:
docs/systems/joma.md.

Shapes: z (M_C,) the attention logits over the contextual tokens; V (M_C, K) the MLP weights seen in the token
basis, V = U_C^T W (column k is v_k of output unit k); W (d, K) the MLP weights. With the logits a = z / tau
entering the attention (`data.Config`), the gradient flow of *any* loss of the readout keeps (Theorem 1, with
tau = 1 there)

- exp attention b = x o e^a:    z - (1 / (2 tau)) sum_k v_k^2   constant (componentwise, exact);
- linear attention b = x o a:   z^2 - sum_k v_k^2               constant (componentwise, exact);
- softmax attention:            z ~ (1 / (2 tau)) (sum_k v_k^2 - b_bar sum_k ||v_k||^2) + c, approximately,
  with b_bar the mean attention; the official script takes b_bar = mean_k x_k and ||W||_F^2 for the last sum.

The functions are jax-traceable (the data's dtype); the scalar closed forms of the V-flow take numbers or arrays.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erf, erfinv, xlogy
from jax.typing import ArrayLike

from .._checks import check_real, real_array

__all__ = [
    "FIG4_MU",
    "blowup_time",
    "entropy",
    "exp_invariant",
    "limit_entropy",
    "linear_invariant",
    "linear_mlp_solution",
    "normalized_correlation",
    "softmax_estimate",
]

#: mu of the official Fig. 4 script: sort(rand(10) * 3 + 1) after torch.manual_seed(0) (float32 draws, as
#: torch gives them; tests/joma/test_theory.py regenerates them where PyTorch is installed).
FIG4_MU = (
    1.265432357788086,
    1.3960914611816406,
    1.9222683906555176,
    2.3668839931488037,
    2.470280170440674,
    2.488769769668579,
    2.896918773651123,
    2.902235984802246,
    3.3046653270721436,
    3.6893341541290283,
)


def exp_invariant(z: ArrayLike, V: ArrayLike, tau: ArrayLike = 1.0) -> jax.Array:
    """The exp-attention invariant z - (1 / (2 tau)) sum_k v_k^2 (Theorem 1, exp attention; tau = 1 there).

    **Arguments:** `z` `(M_C,)`, `V` `(M_C, K)`, `tau` the temperature of a = z / tau.

    **Returns:** `(M_C,)`, constant along the joint gradient flow of (W, z).
    """
    z, V = jnp.asarray(z), jnp.asarray(V)
    return z - jnp.sum(V**2, axis=1) / (2 * tau)


def linear_invariant(z: ArrayLike, V: ArrayLike) -> jax.Array:
    """The linear-attention invariant z^2 - sum_k v_k^2 (Theorem 1, linear attention; any temperature).

    **Arguments:** `z` `(M_C,)`, `V` `(M_C, K)`.

    **Returns:** `(M_C,)`, constant along the joint gradient flow of (W, z).
    """
    z, V = jnp.asarray(z), jnp.asarray(V)
    return z**2 - jnp.sum(V**2, axis=1)


def softmax_estimate(V: ArrayLike, W: ArrayLike, xbar: ArrayLike, tau: ArrayLike) -> jax.Array:
    """The softmax estimate of z from the MLP weights, without its constant: (sum_k v_k^2 - b_bar ||W||_F^2) /
    (2 tau) (Theorem 1, softmax attention), with b_bar = `xbar` and ||W||_F^2 over every row of W, as the
    official Fig. 2/3 script computes it.

    **Arguments:** `V` `(M_C, K)`, `W` `(d, K)`, `xbar` `(M_C,)` the mean attention, `tau`.

    **Returns:** `(M_C,)`; z - estimate is the constant c, fixed at the start.
    """
    V, W, xbar = jnp.asarray(V), jnp.asarray(W), jnp.asarray(xbar)
    return (jnp.sum(V**2, axis=1) - xbar * jnp.sum(W**2)) / (2 * tau)


def normalized_correlation(a: ArrayLike, b: ArrayLike, eps: float = 1e-8) -> jax.Array:
    """The normalised correlation of the official script: the centred vectors, each divided by its norm + eps,
    then their dot product (Fig. 2 and 3 plot it for z and its estimate).

    **Arguments:** `a`, `b` two vectors of one length; `eps` the official 1e-8.

    **Returns:** a scalar in [-1, 1].
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    a = a - jnp.mean(a)
    b = b - jnp.mean(b)
    return jnp.dot(a / (jnp.linalg.norm(a) + eps), b / (jnp.linalg.norm(b) + eps))


def entropy(p: ArrayLike, axis: int = -1) -> jax.Array:
    """The Shannon entropy -sum p log p (natural log, 0 log 0 = 0) along `axis` of probability vectors."""
    p = jnp.asarray(p)
    return -jnp.sum(xlogy(p, p), axis=axis)


def limit_entropy(mu: ArrayLike, temperature: float = 3.0) -> float:
    """H(softmax(mu^2 / T)): the attention entropy at the fixed point v = mu of the nonlinear V-flow
    v' = (mu - v) o softmax(v^2 / T) (Fig. 4), where it ends after the sparse phase.

    **Arguments:** `mu` a 1-D array of targets, `temperature` T (> 0; the official 3).

    **Returns:** the entropy (nats), a float.
    """
    mu = real_array("mu", mu)
    if mu.ndim != 1 or mu.size < 1:
        raise ValueError(f"mu must be a non-empty 1-D array, got shape {mu.shape}")
    T = check_real("temperature", temperature, low=0.0, strict=True)
    return float(entropy(jax.nn.softmax(jnp.asarray(mu**2 / T))))


def blowup_time(delta: ArrayLike, temperature: float = 2.0, v0: ArrayLike = 0.0, level: float = math.inf) -> np.ndarray:
    """The finite time at which v' = delta e^{v^2 / T} reaches infinity (or `level`) from v0: the linear-MLP,
    exp-attention V-flow, each component on its own. From int_{v0}^{v} e^{-s^2/T} ds = delta t,

        t* = (sqrt(pi T) / 2) (erfc(v0 / sqrt(T)) - erfc(level / sqrt(T))) / delta,

    which is sqrt(pi / 2) / delta at the paper's T = 2 (z = v^2 / 2 with tau = 1), v0 = 0 and level = inf.

    **Arguments:** `delta` (> 0, a number or array), `temperature` T (> 0), `v0` the start (a number or array),
    `level` (> every v0; default inf: the blow-up).

    **Returns:** the time, a numpy array of the broadcast shape.
    """
    delta = real_array("delta", delta)
    if np.any(delta <= 0):
        raise ValueError(f"delta must be positive (the flow blows up upwards only for delta > 0), got {delta}")
    T = check_real("temperature", temperature, low=0.0, strict=True)
    v0 = real_array("v0", v0)
    level = check_real("level", level, finite=False)
    if np.any(v0 >= level):
        raise ValueError(f"level must exceed every v0, got level = {level} and v0 = {v0}")
    erfc = np.vectorize(math.erfc, otypes=[float])
    rest = erfc(v0 / math.sqrt(T)) - (0.0 if math.isinf(level) else math.erfc(level / math.sqrt(T)))
    return math.sqrt(math.pi * T) / 2 * rest / delta


def linear_mlp_solution(t: ArrayLike, delta: ArrayLike, temperature: float = 2.0, v0: ArrayLike = 0.0) -> jax.Array:
    """The solution of v' = delta e^{v^2 / T} before its blow-up: v(t) = sqrt(T) erfinv(erf(v0 / sqrt(T)) +
    2 delta t / sqrt(pi T)) (`blowup_time` is where the argument reaches 1; beyond it the result is nan).

    **Arguments:** `t` times (>= 0), `delta`, `temperature` T (> 0), `v0`: numbers or broadcasting arrays.

    **Returns:** v(t), a jax array of the broadcast shape.
    """
    T = check_real("temperature", temperature, low=0.0, strict=True)
    t, delta, v0 = jnp.asarray(t), jnp.asarray(delta), jnp.asarray(v0)
    arg = erf(v0 / math.sqrt(T)) + 2 * delta * t / math.sqrt(math.pi * T)
    return jnp.where(arg < 1, math.sqrt(T) * erfinv(jnp.minimum(arg, 1.0)), jnp.nan)
