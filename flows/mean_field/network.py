"""The finite mean-field transformer of Gao et al. (NeurIPS 2024, eqs. 2.1-2.3; theory digest §1, §2.4).

Depth L, M attention heads and M_mlp neurons per layer; for l = 0..L-1 and every prompt Z in R^{D x (N+1)}

    Z_{2l+1} = Z_{2l}   + 1/(M L)     sum_j V_{l,j} Z_{2l} S(Z_{2l}, W_{l,j}),   S = softmax_keys(Z^T W Z)  (2.1)
    Z_{2l+2} = Z_{2l+1} + 1/(M_mlp L) sum_j W2_{l,j} sigma(W1_{l,j} Z_{2l+1})                          (2.2)

(column i of Z S is sum_k z_k softmax_k(z_k^T W z_i); W1 a row 1 x D, W2 a column D x 1, sigma the
HuberizedReLU of the rebuttal's Eq 2 with threshold h0). The prediction is yhat = Z_{2L}[d, N], the
risk R = mean over prompts of (yhat - y)^2 / 2, and the objective (2.3)

    Q = R + lam/(2 M L) sum_{l,j} (|V_{l,j}|^2 + |W_{l,j}|^2) + lam/(2 M_mlp L) sum_{l,j} (|W1_{l,j}|^2 + |W2_{l,j}|^2).

**Particles** are stored as `{"V": (L, M, D, D), "W": (L, M, D, D), "W1": (L, M_mlp, D), "W2": (L, M_mlp, D)}`;
the widths and the depth are read from these shapes, so one compiled function serves every config of a shape.

**Velocity** (theory §2.3-2.4): the particle flow in training time tau is d theta/d tau = v(theta) with

    v_{V_{l,j}} = -M L dQ/dV_{l,j} = -sum_prompts grad_V <P_{2l+1}, V Z_{2l} S> - lam V_{l,j},

and likewise for W, W1, W2 (with M_mlp for the MLP), where P_k = dR/dZ_k is the discrete adjoint
(P_{2L} = (yhat - y)/n e_d e_N^T, P_k = P_{k+1} + (d_Z layer_k)^* P_{k+1}). `velocity` computes it in that
first-variation form: a forward pass storing Z_k, a backward pass for P_k (vector-Jacobian products of
the layer maps in Z only) and the per-particle gradients in closed matrix form (derived in
`derivations/mean_field.py`):

    grad_V  <P, V Z S>            = P (Z S)^T
    grad_W  <P, V Z S>            = Z G Z^T,   G = S * (B - 1 1^T (S * B)),  B = Z^T V^T P   (* entrywise)
    grad_W2 <P, W2 sigma(W1 Z)>   = P sigma(W1 Z)^T
    grad_W1 <P, W2 sigma(W1 Z)>   = ((W2^T P) * sigma'(W1 Z)) Z^T

It is checked against M L x `jax.grad(objective)` in the tests. Explicit Euler in tau with step eta_tau is
full-batch GD with learning rate eta_tau M L (attention) and eta_tau M_mlp L (MLP): `train(config, "gd",
lr=eta_tau, ...)` (= `train_gd(config, eta_tau, ...)`); `train(config, "sgd", lr, momentum=beta)` is its
heavy-ball variant on the clock tau = lr k / (1 - beta).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._checks import check_choice, check_finite_tree, check_int, check_real
from .._prng import fused
from .._xla import compile_lowered, device_array, options_key
from .._xla import jit as xla_jit
from .data import Config, Prompts, held_out_set, training_set

logger = logging.getLogger(__name__)

__all__ = ["GDRecord", "attention_update", "check_particles", "forward", "gd_optimizer", "huberized_relu",
           "init_curves", "init_particles", "mlp_update", "objective", "particle_gradients", "risk", "train",
           "train_gd", "velocity", "with_seed_init"]

_GROUPS = ("V", "W", "W1", "W2")
_ATTENTION = ("V", "W")
_MLP = ("W1", "W2")


# --------------------------------------------------------------------------- the two encoders


def huberized_relu(z, threshold=1.0):
    """sigma(z) = 0 for z <= 0, z^2/(2 h0) for 0 < z <= h0, z - h0/2 for z > h0 (rebuttal Eq 2, h0 = 1)."""
    pos = jnp.maximum(z, 0.0)
    return jnp.where(z > threshold, z - 0.5 * threshold, 0.5 * pos * pos / threshold)


def huberized_relu_grad(z, threshold=1.0):
    """sigma'(z) = 0, z/h0, 1 on the three pieces (continuous: sigma is C^1)."""
    return jnp.clip(z / threshold, 0.0, 1.0)


def _pair_products(Z):
    """ZZ[n, (d, e), (k, i)] = Z[n, d, k] Z[n, e, i], shape (n, D^2, K^2): every bilinear form z_k^T A z_i
    of the prompt is then one row of a single matrix product (XLA on CPU runs small batched products
    slowly, one large GEMM fast)."""
    n, D, K = Z.shape
    return jnp.einsum("ndk,nei->ndeki", Z, Z).reshape(n, D * D, K * K)


def _softmax_keys(Z, W, ZZ=None):
    """S[n, m, k, i] = softmax_k(z_k^T W_m z_i) for Z (n, D, K) and W (M, D, D)."""
    n, D, K = Z.shape
    ZZ = _pair_products(Z) if ZZ is None else ZZ
    logits = jnp.einsum("mx,nxy->nmy", W.reshape(W.shape[0], D * D), ZZ).reshape(n, W.shape[0], K, K)
    return jax.nn.softmax(logits, axis=2)


def _attend(Z, S):
    """T[n, m, d, i] = (Z S_m)[d, i] = sum_k Z[n, d, k] S[n, m, k, i]."""
    n, M, K, _ = S.shape
    T = jnp.einsum("ndk,nkx->ndx", Z, jnp.swapaxes(S, 1, 2).reshape(n, K, M * K))
    return jnp.swapaxes(T.reshape(n, Z.shape[1], M, K), 1, 2)


def _query_key_pairs(Z):
    """ZZ[(n, i, k), (d, e)] = Z[n, d, k] Z[n, e, i], shape (n K^2, D^2): the logits z_k^T W_m z_i of every
    head are then one (n K^2, D^2) x (D^2, M) matrix product whose output has the head axis last."""
    n, D, K = Z.shape
    return jnp.einsum("ndk,nei->nikde", Z, Z).reshape(n * K * K, D * D)


def _attention_parts(Z, V, W):
    """(update, S, VZ, ZZ) of `attention_update` in the heads-last layout used for speed:
    S[n, i, k, m] = softmax_k(z_k^T W_m z_i) (query i, key k, head m), VZ[n, k, m, c] = (V_m z_k)[c],
    update[n, c, i] = sum_{k, m} S[n, i, k, m] VZ[n, k, m, c]."""
    n, D, K = Z.shape
    M = V.shape[0]
    ZZ = _query_key_pairs(Z)
    logits = (ZZ @ W.reshape(M, D * D).T).reshape(n, K, K, M)
    S = jax.nn.softmax(logits, axis=2)
    VZ = jnp.einsum("ndk,mcd->nkmc", Z, V)
    # the product is written (n, query, c), the order XLA's batched GEMM produces, and only this small
    # result is transposed (an output order (n, c, query) made XLA transpose the large operand first)
    update = jnp.swapaxes(jnp.einsum("nix,nxc->nic", S.reshape(n, K, K * M), VZ.reshape(n, K * M, D)), 1, 2)
    return update, S, VZ, ZZ


def attention_update(Z, V, W):
    """sum_j f(Z, (V_j, W_j)) = sum_j V_j Z S(Z, W_j) for Z (n, D, K), V and W (M, D, D) -> (n, D, K).

    The caller scales by 1/(M L). Each term is the rebuttal's Eq 1, f(Z, theta) = V Z softmax(Z^T W Z).
    Differentiable in every mode (forward and reverse); `_attention_update_rev` is the same map with a
    hand-written reverse-mode rule, used where only gradients are taken (GD, explicit flow solves).
    """
    return _attention_parts(Z, V, W)[0]


# Elements of one (prompts, K, K, M) attention tensor of a block of prompts in `_attention_update_rev`: a
# block of at most 2^17 doubles (1 MiB) keeps the softmax weights, their adjoint and the logit adjoint of
# the block in cache between the operations that read them, where the whole batch went to memory between
# every two. On CPU the pass is memory-bound: the gradient at 64 prompts, K = 9, M = 256, L = 8 took
# 0.31 s on one core in blocks of 4 (2^17), 0.34 s in blocks of 8, 0.48 s in blocks of 32, 0.50 s unblocked.
_ATTENTION_BLOCK_ELEMENTS = 1 << 17


def _attention_block(n: int, K: int, M: int) -> int:
    """Prompts per block: the largest divisor of n whose (block, K, K, M) tensors hold at most
    `_ATTENTION_BLOCK_ELEMENTS` entries (n itself when the whole batch does; 1 at the least)."""
    per_prompt = K * K * M
    if n * per_prompt <= _ATTENTION_BLOCK_ELEMENTS:
        return n
    return max(b for b in range(1, n + 1) if n % b == 0 and b * per_prompt <= max(_ATTENTION_BLOCK_ELEMENTS,
                                                                                   per_prompt))


def _attention_update_rev(Z, V, W):
    """`attention_update` with a hand-written vector-Jacobian product (reverse mode only).

    The residuals are (Z, V, W) alone: the backward pass recomputes S instead of storing the
    (n, K, K, M) attention weights of every layer (on CPU, writing and reading those stacked over the
    depth scan cost more than recomputing them), and it contracts in the heads-last layout with no
    transposes of the large tensors. Forward and backward run over blocks of prompts
    (`_attention_block`), the parameter adjoints summed over the blocks. Agrees with autodiff of
    `attention_update` to rounding (tests)."""
    n, D, K = Z.shape
    return _attention_rev_blocks(Z, V, W, _attention_block(n, K, V.shape[0]))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _attention_rev_blocks(Z, V, W, block):
    n, D, K = Z.shape
    if block == n:
        return _attention_parts(Z, V, W)[0]
    out = jax.lax.map(lambda z: _attention_parts(z, V, W)[0], Z.reshape(n // block, block, D, K))
    return out.reshape(n, D, K)


def _attention_rev_fwd(Z, V, W, block):
    return _attention_rev_blocks(Z, V, W, block), (Z, V, W)


def _attention_rev_bwd(block, residuals, P):
    Z, V, W = residuals
    n, D, K = Z.shape
    if block == n:
        return _attention_vjp(Z, V, W, P)

    def one_block(acc, zp):
        dz, dv, dw = _attention_vjp(zp[0], V, W, zp[1])
        return (acc[0] + dv, acc[1] + dw), dz

    blocks = (Z.reshape(n // block, block, D, K), P.reshape(n // block, block, D, K))
    (dV, dW), dZ = jax.lax.scan(one_block, (jnp.zeros_like(V), jnp.zeros_like(W)), blocks)
    return dZ.reshape(n, D, K), dV, dW


def _attention_vjp(Z, V, W, P):
    """(dZ, dV, dW) of <P, attention_update(Z, V, W)>, with every product over the (n, K, K, M) tensors a
    plain (batched) GEMM of operands in their stored order: XLA on CPU transposed the large operand (or the
    output) of the einsum orders ("nikm,nci->nkmc" and the like) before and after the GEMM, which cost
    several times the product itself. The transposes left are of the small factors (Z, P: n K D entries;
    the pair products: n K^2 D^2)."""
    n, D, K = Z.shape
    M = V.shape[0]
    _, S, VZ, _ = _attention_parts(Z, V, W)
    PT = jnp.swapaxes(P, 1, 2)  # (n, query i, c)
    dVZ = jnp.einsum("nix,nic->nxc", S.reshape(n, K, K * M), PT).reshape(n * K, M * D)  # rows (n, k), cols (m, c)
    dS = jnp.einsum("nxc,nic->nix", VZ.reshape(n, K * M, D), PT).reshape(n, K, K, M)
    G = (S * (dS - jnp.sum(S * dS, axis=2, keepdims=True))).reshape(n * K * K, M)  # d logits
    pairs_t = jnp.einsum("ndk,nei->denik", Z, Z).reshape(D * D, n * K * K)  # the pair products, transposed
    dW = (pairs_t @ G).T.reshape(M, D, D)
    dZZ = (G @ W.reshape(M, D * D)).reshape(n, K, K, D, D)
    ZT = jnp.swapaxes(Z, 1, 2).reshape(n * K, D)
    dZ = (jnp.einsum("nikde,nei->ndk", dZZ, Z) + jnp.einsum("nikde,ndk->nei", dZZ, Z)
          + jnp.swapaxes((dVZ @ V.reshape(M * D, D)).reshape(n, K, D), 1, 2))
    dV = (dVZ.T @ ZT).reshape(M, D, D)
    return dZ, dV, dW


_attention_rev_blocks.defvjp(_attention_rev_fwd, _attention_rev_bwd)


def mlp_update(Z, W1, W2, threshold=1.0):
    """sum_j h(Z, (W1_j, W2_j)) = sum_j W2_j sigma(W1_j Z) for Z (n, D, K), W1 and W2 (M_mlp, D)."""
    pre = jnp.einsum("jd,ndk->njk", W1, Z)
    return jnp.einsum("jc,njk->nck", W2, huberized_relu(pre, threshold))


# --------------------------------------------------------------------------- particles


def _uniform(key, shape, radius, dtype):
    """`jax.random.uniform(key, shape, dtype, -radius, radius)`, drawn as a flat vector and reshaped.

    The same values: the (default, partitionable) threefry generator makes each entry a function of the key
    and its flat index only (tests). But a flat draw is one small compiled program per size, where a draw
    of rank 3 or 4 compiles several times slower on CPU (seconds per shape; the radius is traced either way).
    The key is rewrapped by `flows._prng.fused` (the threefry hash unrolled: the same bits, about half the
    compile of the draw on CPU).
    """
    if not jax.config.jax_threefry_partitionable:
        return jax.random.uniform(key, shape, dtype, -radius, radius)
    flat = jax.random.uniform(fused(key), (math.prod(shape),), dtype, -radius, radius)
    return jnp.asarray(np.asarray(flat).reshape(shape))


def init_curves(config: Config, depths, key=None, dtype=None) -> dict:
    """Initial particles of the depth-smooth laws evaluated at arbitrary depths `depths` (k,) in [0, 1].

    `config.init = "tied"`: theta_j(t) = A_j; `"smooth"`: theta_j(t) = (1 - t) A_j + t B_j, with A, B
    i.i.d. uniform on [-a, a]. The same base draws serve the finite network (depths l / L) and the
    continuous-depth reference (its depth nodes), so both start from one law (coupled).
    Returns the particle dict with leading axis k.
    """
    if config.init not in ("tied", "smooth"):
        raise ValueError(f"init_curves needs config.init 'tied' or 'smooth', got {config.init!r}")
    key = config.keys()[1] if key is None else key
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    t = np.asarray(depths, dtype)
    if t.ndim != 1:
        raise ValueError(f"depths must be a 1-D array, got shape {t.shape}")
    D, M, Mm, a = config.D, config.M, config.M_mlp, config.init_radius
    shapes = {"V": (M, D, D), "W": (M, D, D), "W1": (Mm, D), "W2": (Mm, D)}
    keys = dict(zip(_GROUPS, jax.random.split(key, 4), strict=True))
    out = {}
    for name, shape in shapes.items():
        kA, kB = jax.random.split(keys[name])
        # the curves are elementwise IEEE operations on the draws, in numpy: no compiled program per shape
        A = np.asarray(_uniform(kA, shape, a, dtype))
        if config.init == "tied":
            curve = np.broadcast_to(A, (t.shape[0],) + shape)
        else:
            B = np.asarray(_uniform(kB, shape, a, dtype))
            w = t.reshape((-1,) + (1,) * len(shape))
            curve = (1.0 - w) * A[None] + w * B[None]
        out[name] = jnp.asarray(curve, dtype)
    return out


def init_particles(config: Config, key=None, dtype=None) -> dict:
    """The initial particles of the network, i.i.d. from rho0 (see `Config.init`), seeded by `config`.

    Returns `{"V": (L, M, D, D), "W": (L, M, D, D), "W1": (L, M_mlp, D), "W2": (L, M_mlp, D)}` (W1 rows and
    W2 columns stored as vectors); every entry lies in [-a, a], a = init_scale / sqrt(D).
    """
    key = config.keys()[1] if key is None else key
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    if config.init != "iid":
        return init_curves(config, np.arange(config.L) / config.L, key=key, dtype=dtype)
    L, D, M, Mm, a = config.L, config.D, config.M, config.M_mlp, config.init_radius
    shapes = {"V": (L, M, D, D), "W": (L, M, D, D), "W1": (L, Mm, D), "W2": (L, Mm, D)}
    if not jax.config.jax_threefry_partitionable:
        keys = dict(zip(_GROUPS, jax.random.split(key, 4), strict=True))
        return {name: _uniform(keys[name], shape, a, dtype) for name, shape in shapes.items()}
    return dict(zip(_GROUPS, _draw_particles(key, tuple(shapes[name] for name in _GROUPS), dtype, a), strict=True))


@functools.partial(xla_jit, one_shot=True, static_argnums=(1, 2))
def _draw_particles(key, shapes, dtype, radius):
    """The draws of `_uniform` for the groups of `_GROUPS` (subkeys split off `key` in that order) as one
    program compiled for compile time (`flows._xla`, one_shot: XLA backend level 0), 0.6-0.7 s -> 0.2-0.3 s
    for L = 4, M = 64 on a first call. The values are `jax.random.uniform`'s except perhaps in the last bit:
    level 0 fuses no multiply-add in its `u (b - a) + a`, so an entry may differ by 1 ulp from an eager draw
    compiled at XLA's default level (tests: bit for bit at equal levels)."""
    keys = jax.random.split(key, len(shapes))
    return tuple(jax.random.uniform(fused(k), (math.prod(shape),), dtype, -radius, radius).reshape(shape)
                 for k, shape in zip(keys, shapes, strict=True))


def check_particles(config: Config, particles) -> dict:
    """Validate a particle dict against `config` (keys, shapes, finiteness); returns it as arrays."""
    if not isinstance(particles, dict) or set(particles) != set(_GROUPS):
        raise ValueError(f"particles must be a dict with keys {_GROUPS}, got "
                         f"{sorted(particles) if isinstance(particles, dict) else type(particles).__name__}")
    L, D, M, Mm = config.L, config.D, config.M, config.M_mlp
    want = {"V": (L, M, D, D), "W": (L, M, D, D), "W1": (L, Mm, D), "W2": (L, Mm, D)}
    out = {}
    for name in _GROUPS:
        arr = _as_array(f"particles[{name!r}]", particles[name])
        if arr.shape != want[name]:
            raise ValueError(f"particles[{name!r}] must have shape {want[name]} (config L={L}, M={M}, "
                             f"M_mlp={Mm}, D={D}), got {arr.shape}")
        if not jnp.issubdtype(arr.dtype, jnp.floating):
            raise ValueError(f"particles[{name!r}] must be floating point, got {arr.dtype}")
        check_finite_tree(f"particles[{name!r}]", arr)
        out[name] = arr
    return out


def _as_array(name, value):
    """`jnp.asarray(value)`, or a ValueError naming `name` for what is not a numeric array."""
    try:
        arr = jnp.asarray(value)
    except (TypeError, ValueError, OverflowError) as err:
        raise ValueError(f"{name} must be a numeric array, got {type(value).__name__}") from err
    return arr


def _check_data(config: Config, data, name: str = "data") -> Prompts:
    """`data` (a `Prompts` or a pair) validated against `config`; errors name the argument `name`."""
    if not isinstance(data, Prompts):
        if isinstance(data, tuple) and len(data) == 2:
            data = Prompts(*data)
        else:
            raise ValueError(f"{name} must be a flows.mean_field.Prompts(Z0, y)")
    Z0, y = _as_array(f"{name}.Z0", data.Z0), _as_array(f"{name}.y", data.y)
    for field, arr in ((f"{name}.Z0", Z0), (f"{name}.y", y)):
        if not jnp.issubdtype(arr.dtype, jnp.floating):
            raise ValueError(f"{field} must be floating point, got {arr.dtype}")
        check_finite_tree(field, arr)
    want = (config.D, config.N + 1)
    if Z0.ndim != 3 or Z0.shape[1:] != want:
        raise ValueError(f"{name}.Z0 must have shape (n, D, N + 1) = (n, {want[0]}, {want[1]}), got {Z0.shape}")
    if y.shape != (Z0.shape[0],):
        raise ValueError(f"{name}.y must have shape (n,) = ({Z0.shape[0]},), got {y.shape}")
    return Prompts(Z0, y)


# --------------------------------------------------------------------------- forward, risk, objective


def _layer_scales(particles):
    L, M = particles["V"].shape[:2]
    Mm = particles["W1"].shape[1]
    return 1.0 / (M * L), 1.0 / (Mm * L)


def _forward_states(particles, Z0, threshold, rev=False):
    """(Z_{2L}, Z_in_attention (L, n, D, K), Z_in_mlp (L, n, D, K)) of eqs. (2.1)-(2.2). `rev=True` uses the
    attention with the hand-written reverse-mode rule (faster gradients; no forward-mode AD)."""
    sa, sm = _layer_scales(particles)
    attention = _attention_update_rev if rev else attention_update

    def layer(Z, p):
        V, W, W1, W2 = p
        Z1 = Z + sa * attention(Z, V, W)
        Z2 = Z1 + sm * mlp_update(Z1, W1, W2, threshold)
        return Z2, (Z, Z1)

    xs = tuple(particles[k] for k in _GROUPS)
    Z_final, (Z_att, Z_mlp) = jax.lax.scan(layer, Z0, xs)
    return Z_final, Z_att, Z_mlp


def _readout(Z_final, d):
    return Z_final[:, d, -1]


def _forward(particles, Z0, threshold, d, rev=False):
    return _readout(_forward_states(particles, Z0, threshold, rev)[0], d)


def _decay(particles, lam):
    sa, sm = _layer_scales(particles)
    att = sum(jnp.sum(particles[k] ** 2) for k in _ATTENTION)
    mlp = sum(jnp.sum(particles[k] ** 2) for k in _MLP)
    return 0.5 * lam * (sa * att + sm * mlp)


def _risk(particles, Z0, y, threshold, d, rev=False):
    err = _forward(particles, Z0, threshold, d, rev) - y
    return 0.5 * jnp.mean(err * err)


def _objective(particles, Z0, y, lam, threshold, d, rev=False):
    return _risk(particles, Z0, y, threshold, d, rev) + _decay(particles, lam)


# The public evaluations run one jitted program per shape: called eagerly, the depth `lax.scan` would be
# traced and compiled again on every call (its body is a new closure each time), and every operation around
# it compiled on its own. lam, the threshold and d are traced, so new values do not recompile.
_forward_jit = xla_jit(_forward, static_argnames=("rev",))
_risk_jit = xla_jit(_risk, static_argnames=("rev",))
_objective_jit = xla_jit(_objective, static_argnames=("rev",))


def _traced_constants(config: Config, dtype):
    """(lam, threshold, d) as arrays: traced arguments of the jitted evaluations."""
    return (jnp.asarray(config.lam, dtype), jnp.asarray(config.threshold, dtype),
            jnp.asarray(config.d, jnp.int32))


def forward(config: Config, particles, Z0) -> jax.Array:
    """yhat = Z_{2L}[d, N] for prompts `Z0 (n, D, N + 1)` -> `(n,)`."""
    particles = check_particles(config, particles)
    Z0 = _check_data(config, Prompts(Z0, jnp.zeros(jnp.shape(Z0)[:1], jnp.result_type(Z0)))).Z0
    _, threshold, d = _traced_constants(config, Z0.dtype)
    return _forward_jit(particles, Z0, threshold, d)


def risk(config: Config, particles, data: Prompts) -> jax.Array:
    """R = mean over prompts of (yhat - y)^2 / 2 (a scalar)."""
    particles, data = check_particles(config, particles), _check_data(config, data)
    _, threshold, d = _traced_constants(config, data.Z0.dtype)
    return _risk_jit(particles, data.Z0, data.y, threshold, d)


def objective(config: Config, particles, data: Prompts) -> jax.Array:
    """Q = R + lam/(2 M L) sum(|V|^2 + |W|^2) + lam/(2 M_mlp L) sum(|W1|^2 + |W2|^2) (eq. 2.3)."""
    particles, data = check_particles(config, particles), _check_data(config, data)
    return _objective_jit(particles, data.Z0, data.y, *_traced_constants(config, data.Z0.dtype))


# --------------------------------------------------------------------------- velocity (first variation)


def particle_gradients(Z_att, P_att, Z_mlp, P_mlp, particles_l, threshold):
    """Closed-form gradients of sum_prompts <P, f> and <P, h> w.r.t. the particles of one layer.

    `Z_att` (n, D, K) is the input of the attention sublayer and `P_att` the adjoint of its output;
    likewise `Z_mlp`, `P_mlp` for the MLP sublayer; `particles_l` = (V, W, W1, W2) of the layer.
    Returns (gV, gW, gW1, gW2) with the particle shapes (module docstring for the formulas).
    """
    V, W, W1, W2 = particles_l
    n, D, K = Z_att.shape
    M = V.shape[0]
    ZZ = _pair_products(Z_att)
    S = _softmax_keys(Z_att, W, ZZ)  # (n, M, K, K)
    T = _attend(Z_att, S)  # (n, M, D, K) = Z S_m
    gV = jnp.einsum("nci,nmdi->mcd", P_att, T)  # sum_n P (Z S)^T
    ZP = jnp.einsum("ndk,nci->ncdki", Z_att, P_att).reshape(n, D * D, K * K)
    B = jnp.einsum("mx,nxy->nmy", V.reshape(M, D * D), ZP).reshape(n, M, K, K)  # B = Z^T V^T P
    G = S * (B - jnp.sum(S * B, axis=2, keepdims=True))
    gW = jnp.einsum("nmy,nxy->mx", G.reshape(n, M, K * K), ZZ).reshape(M, D, D)  # sum_n Z G Z^T
    pre = jnp.einsum("jd,ndk->njk", W1, Z_mlp)
    gW2 = jnp.einsum("nck,njk->jc", P_mlp, huberized_relu(pre, threshold))
    c = jnp.einsum("jc,nck->njk", W2, P_mlp) * huberized_relu_grad(pre, threshold)
    gW1 = jnp.einsum("njk,ndk->jd", c, Z_mlp)
    return gV, gW, gW1, gW2


def _adjoint_states(particles, Z0, y, threshold, d):
    """(Z_att, Z_mlp, P_att, P_mlp), each (L, n, D, K): the input of every sublayer (Z_{2l}, Z_{2l+1}) and
    the adjoint P = dR/dZ of its output (P_att of Z_{2l+1}, P_mlp of Z_{2l+2}), by a backward scan of
    vector-Jacobian products of the layer maps in Z (P_{2L} = (yhat - y)/n e_d e_N^T)."""
    sa, sm = _layer_scales(particles)
    Z_final, Z_att, Z_mlp = _forward_states(particles, Z0, threshold)
    err = (_readout(Z_final, d) - y) / Z0.shape[0]
    P_final = jnp.zeros_like(Z_final).at[:, d, -1].set(err)

    def back(P, xs):
        Za, Zm, V, W, W1, W2 = xs
        _, vjp_m = jax.vjp(lambda Z: Z + sm * mlp_update(Z, W1, W2, threshold), Zm)
        (P_att,) = vjp_m(P)  # adjoint of Z_{2l+1}
        _, vjp_a = jax.vjp(lambda Z: Z + sa * attention_update(Z, V, W), Za)
        (P_in,) = vjp_a(P_att)  # adjoint of Z_{2l}
        return P_in, (P_att, P)

    xs = (Z_att, Z_mlp) + tuple(particles[k] for k in _GROUPS)
    _, (P_att, P_mlp) = jax.lax.scan(back, P_final, xs, reverse=True)
    return Z_att, Z_mlp, P_att, P_mlp


def _velocity(particles, Z0, y, lam, threshold, d):
    """-(M L) dQ/dtheta per attention particle and -(M_mlp L) dQ/dw per MLP particle (first variation)."""
    Z_att, Z_mlp, P_att, P_mlp = _adjoint_states(particles, Z0, y, threshold, d)
    layers = tuple(particles[k] for k in _GROUPS)
    grads = jax.vmap(particle_gradients, in_axes=(0, 0, 0, 0, 0, None))(
        Z_att, P_att, Z_mlp, P_mlp, layers, threshold)
    return {k: -g - lam * particles[k] for k, g in zip(_GROUPS, grads, strict=True)}


def _velocity_autodiff(particles, Z0, y, lam, threshold, d, rev=True):
    """-(M L) dQ/dtheta by reverse-mode AD; `rev=False` keeps it differentiable in forward mode (implicit
    solvers need the Jacobian of the velocity)."""
    L, M = particles["V"].shape[:2]
    Mm = particles["W1"].shape[1]
    g = jax.grad(_objective)(particles, Z0, y, lam, threshold, d, rev)
    scale = {"V": M * L, "W": M * L, "W1": Mm * L, "W2": Mm * L}
    return {k: -scale[k] * g[k] for k in _GROUPS}


_VELOCITY_METHODS = {"adjoint": xla_jit(_velocity), "autodiff": xla_jit(_velocity_autodiff, static_argnames=("rev",))}


def velocity(config: Config, particles, data: Prompts, method: str = "autodiff") -> dict:
    """The mean-field velocity of every particle (a dict shaped like the particles).

    v = -M L dQ/d theta (attention), -M_mlp L dQ/d w (MLP) = -grad delta Q/delta rho at the particle
    (theory §2.3-2.4). `method="autodiff"` (default, what the flow integrates) scales reverse-mode
    `jax.grad(objective)`; `"adjoint"` evaluates the first-variation form of the module docstring (adjoints
    P_k, closed-form per-particle gradients). The two agree to rounding (tests); autodiff is the faster
    one on CPU (9.6 ms against 15.7 ms at L = 4, M = 16, 64 prompts), because it reuses the forward pass.
    """
    if method not in _VELOCITY_METHODS:
        raise ValueError(f"method must be one of {tuple(_VELOCITY_METHODS)}, got {method!r}")
    particles, data = check_particles(config, particles), _check_data(config, data)
    return _VELOCITY_METHODS[method](particles, data.Z0, data.y, *_traced_constants(config, data.Z0.dtype))


# --------------------------------------------------------------------------- GD on the finite network


@dataclasses.dataclass(frozen=True)
class GDRecord:
    """Full-batch GD (or heavy-ball SGD) on the finite network, at its saved steps.

    The fields every system's network record shares (README "One vocabulary"):

    - `ts`: flow time of each saved step, tau = eta_tau k / (1 - momentum) (first entry 0; `tau` is the same
      array); `steps`: the step numbers k.
    - `observables`: name -> array with leading axis len(ts); `Q`, `R`, `dissipation`, `max_speed`,
      `mean_speed`, `train_rmse`, `test_rmse` (the names of `observables.OBSERVABLES`, as on the flow's
      `Trajectory`). Also reachable as `record["Q"]` or `record.Q`.
    - `config`: the `Config` trained (with the `seed`/`init` overrides of `train`); `lr`: the flow-time rate
      as given (a number or `{"attention": .., "mlp": ..}`); `compile_s`, `run_s`: compile and training wall
      time.

    And: `particles` (the final particles); `eta_tau` (the clock's rate: `lr`, or the largest rate of a dict);
    `lr_attention`, `lr_mlp` (the optimiser's learning rates, eta M L and eta M_mlp L); `optimizer`
    (`"gd"`/`"sgd"`), `momentum`.
    """

    ts: np.ndarray
    steps: np.ndarray
    observables: dict
    particles: dict
    eta_tau: float
    lr_attention: float
    lr_mlp: float
    compile_s: float
    run_s: float
    lr: float | dict | None = None
    config: Config | None = None
    optimizer: str = "gd"
    momentum: float = 0.0

    @property
    def tau(self) -> np.ndarray:
        return self.ts

    def __getitem__(self, name):
        return self.observables[name]

    def __getattr__(self, name):
        if name != "observables" and name in self.__dict__.get("observables", {}):
            return self.__dict__["observables"][name]
        raise AttributeError(name)


def _save_steps(steps, save_every):
    if isinstance(save_every, bool) or not isinstance(save_every, (int, np.integer)) or save_every < 1:
        raise ValueError(f"save_every must be an integer >= 1, got {save_every!r}")
    arr = np.arange(0, steps + 1, save_every, dtype=np.int64)
    return arr if arr[-1] == steps else np.concatenate([arr, [steps]])


def _check_eta(eta_tau):
    return check_real("eta_tau", eta_tau, low=0.0, strict=True)


_LR_GROUPS = ("attention", "mlp")


def _check_lr(lr, name="lr"):
    """A positive flow-time rate, or a dict {"attention": .., "mlp": ..} of one per parameter group."""
    if isinstance(lr, dict):
        if set(lr) != set(_LR_GROUPS):
            raise ValueError(f"{name} must be a number or a dict with the keys {_LR_GROUPS} (one flow-time rate "
                             f"per parameter group), got keys {sorted(map(str, lr))}")
        return {k: check_real(f"{name}[{k!r}]", lr[k], low=0.0, strict=True) for k in _LR_GROUPS}
    return check_real(name, lr, low=0.0, strict=True)


def gd_optimizer(config: Config, eta_tau, momentum: float | None = None) -> optax.GradientTransformation:
    """`optax.sgd` with learning rate eta_tau M L on (V, W) and eta_tau M_mlp L on (W1, W2).

    `eta_tau`: one flow-time rate, or `{"attention": .., "mlp": ..}` (one per group); `momentum`: heavy-ball
    momentum beta of `optax.sgd` (`None`: plain GD). The learning rates (and beta) are injected
    hyperparameters (they live in the optimiser state), so one compiled training program serves every rate.
    """
    eta_tau = _check_lr(eta_tau, "eta_tau")
    att, mlp = (eta_tau["attention"], eta_tau["mlp"]) if isinstance(eta_tau, dict) else (eta_tau, eta_tau)
    return _optimizer(att * config.M * config.L, mlp * config.M_mlp * config.L, momentum)


def _optimizer(lr_attention, lr_mlp, momentum=None):
    labels = {"V": "attention", "W": "attention", "W1": "mlp", "W2": "mlp"}
    sgd = optax.inject_hyperparams(optax.sgd)
    extra = {} if momentum is None else {"momentum": momentum}
    return optax.multi_transform({"attention": sgd(learning_rate=lr_attention, **extra),
                                  "mlp": sgd(learning_rate=lr_mlp, **extra)}, labels)


# One program for every (eta_tau, steps, lam, threshold) of a given shape: everything but shapes is traced. The
# heavy-ball variant is a second template (its state holds the momentum buffers; beta is traced too).
_GD_TEMPLATE = _optimizer(1.0, 1.0)
_GD_MOMENTUM_TEMPLATE = _optimizer(1.0, 1.0, 0.5)


def _gd_program(basic: bool, template=_GD_TEMPLATE):
    """The jitted GD run (one `fori_loop` of steps per saved segment) recording `observables.summary`
    (`basic=False`) or only Q and R (`basic=True`) at the saved steps, with the optimiser `template`."""
    from . import observables as obs

    def run(particles, opt_state, increments, args):
        def one_step(_, carry):
            p, s = carry
            g = jax.grad(_objective)(p, args["Z0"], args["y"], args["lam"], args["threshold"], args["d"], True)
            updates, s = template.update(g, s, p)
            return optax.apply_updates(p, updates), s

        def observe(p):
            if basic:
                return {k: f(0.0, p, args) for k, f in obs.BASIC_OBSERVABLES.items()}
            return obs.summary(0.0, p, args)

        def segment(carry, num):
            carry = jax.lax.fori_loop(0, num, one_step, carry)
            return carry, observe(carry[0])

        # the first save is a segment of 0 steps: the observables appear once in the program (compiled once)
        zero = jnp.zeros((1,), increments.dtype)
        (p, _), series = jax.lax.scan(segment, (particles, opt_state), jnp.concatenate([zero, increments]))
        return p, series

    return run


_gd_run = jax.jit(_gd_program(False))
_gd_run_basic = jax.jit(_gd_program(True))
_GD_COMPILED: dict = {}
_GD_BASIC_COMPILED: dict = {}
# (basic, heavy ball) -> (jitted run, its cache of compiled programs)
_GD_PROGRAMS = {
    (False, False): (_gd_run, _GD_COMPILED),
    (True, False): (_gd_run_basic, _GD_BASIC_COMPILED),
    (False, True): (jax.jit(_gd_program(False, _GD_MOMENTUM_TEMPLATE)), {}),
    (True, True): (jax.jit(_gd_program(True, _GD_MOMENTUM_TEMPLATE)), {}),
}


def compile_cached(cache: dict, jitted, call: tuple, size: int = 16):
    """`jitted.lower(*call).compile()`, cached in `cache` on the shapes, dtypes and shardings of `call`.
    Returns (compiled, compile_s), compile_s = 0 for a cache hit."""
    from ..solve import _signature

    key = (_signature(call), options_key())
    compiled = cache.get(key)
    if compiled is not None:
        return compiled, 0.0
    start = time.perf_counter()
    compiled = compile_lowered(jitted.lower(*call))
    compile_s = time.perf_counter() - start
    if len(cache) >= size:
        cache.pop(next(iter(cache)))
    cache[key] = compiled
    return compiled, compile_s


_OPTIMIZERS = ("gd", "sgd")


def with_seed_init(config: Config, seed=None, init=None) -> Config:
    """`config` with `seed` and/or `init` replaced (`None` keeps the config's): the `seed=`, `init=` keywords
    of `train` and `solve_flow`, as in every system (ValueError naming a bad value)."""
    if not isinstance(config, Config):
        raise ValueError(f"config must be a mean_field.Config, got {type(config).__name__}")
    new = {k: v for k, v in (("seed", seed), ("init", init)) if v is not None}
    return config.replace(**new) if new else config


def train(config: Config, optimizer: str = "gd", lr: float | dict = 0.1, steps: int = 100, save_every: int = 1,
          *, momentum: float = 0.0, seed: int | None = None, init: str | None = None, particles=None,
          data: Prompts | None = None, test: Prompts | None = None, mesh=None,
          observables: str = "all") -> GDRecord:
    """Full-batch GD (or heavy-ball GD) with optax on the finite network from `init_particles(config)`.

    The same vocabulary as `cooccurrence.train` and `scan_snap.train` (README "One vocabulary").

    **Arguments:**

    - `optimizer`: `"gd"` (plain full-batch GD) or `"sgd"` (full batch too, with heavy-ball `momentum`;
      `momentum=0` is `"gd"`). `momentum` beta in [0, 1) is for `"sgd"` only (ValueError with `"gd"`).
    - `lr` (> 0): the flow-time rate eta_tau, or `{"attention": .., "mlp": ..}` (one per parameter group).
      The optimiser's learning rates are eta M L (attention) and eta M_mlp L (MLP) on the raw gradients of Q.
    - `steps` (>= 1); `save_every`: record every k-th step (and the last).
    - `seed`, `init`: override `config.seed` (training set, initial particles, test prompts) and
      `config.init` (`None`: the config's), as the same keywords of `solve_flow` and of the other systems.
      `init` with `particles` is a ValueError (the particles are the initialisation).
    - `particles`, `data`, `test`: override the initial particles, the training set and the fresh test
      prompts (defaults from `config`).
    - `mesh`: a `jax.sharding.Mesh` (e.g. `sharding.particle_mesh()`) to shard the particle axis over.
    - `observables`: `"all"` (every entry of `observables.OBSERVABLES` at the saved steps, one velocity
      evaluation each) or `"basic"` (Q and R only: one forward pass each; what throughput runs use).

    **Clock:** step k sits at flow time tau = eta k / (1 - momentum) (`flows.network_records.flow_time`; eta
    the largest rate of a dict), the one momentum clock of every system: explicit Euler of the particle flow
    with step eta is the `"gd"` run, and heavy ball at rate eta tracks GD at rate eta / (1 - beta).

    One compiled program serves every rate, momentum, steps, seed, lam and threshold of the same shapes and
    number of saved steps (one for plain GD, one for heavy ball; `compile_s` is 0 when it was reused).

    **Returns:** a `GDRecord`. **Raises:** `ValueError` naming a bad argument; `flows.TrainingError` (a
    `flows.FlowError`) when Q becomes non-finite, naming the first saved step where it did and carrying the
    record as `error.record` (and `error.trajectory`).
    """
    from ..network_records import TrainingError, flow_time
    from . import observables as obs
    from .sharding import shard_particles

    config = with_seed_init(config, seed, init)
    if init is not None and particles is not None:
        raise ValueError("init must be None when particles are given (the particles are the initialisation)")
    check_choice("optimizer", optimizer, _OPTIMIZERS)
    lr = _check_lr(lr)
    beta = check_real("momentum", momentum, low=0.0, high=1.0, high_strict=True)
    if optimizer == "gd" and beta != 0.0:
        raise ValueError(f"momentum is for optimizer='sgd' only (heavy ball), got momentum={momentum!r} with "
                         f"optimizer='gd'")
    clock = max(lr.values()) if isinstance(lr, dict) else lr
    steps = check_int("steps", steps, 1)  # int32 step counts in the compiled loop
    save = _save_steps(steps, save_every)
    check_choice("observables", observables, ("all", "basic"))
    particles = init_particles(config) if particles is None else particles
    particles = check_particles(config, particles)
    data = _check_data(config, training_set(config) if data is None else data)
    test = _check_data(config, held_out_set(config) if test is None else test, "test")
    if mesh is not None:
        particles = shard_particles(particles, mesh)
    args = obs.make_args(config, data, test)
    dtype = particles["V"].dtype
    heavy = beta != 0.0
    opt_state = gd_optimizer(config, lr, beta if heavy else None).init(particles)
    opt_state = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype) if jnp.issubdtype(
        jnp.result_type(x), jnp.floating) else x, opt_state)
    increments = device_array(np.diff(save), jnp.int32)
    call = (particles, opt_state, increments, args)
    jitted, cache = _GD_PROGRAMS[(observables == "basic", heavy)]
    compiled, compile_s = compile_cached(cache, jitted, call)
    start = time.perf_counter()
    final, series = jax.block_until_ready(compiled(particles, opt_state, increments, args))
    run_s = time.perf_counter() - start
    series = {k: np.asarray(v) for k, v in series.items()}
    att, mlp = (lr["attention"], lr["mlp"]) if isinstance(lr, dict) else (lr, lr)
    record = GDRecord(ts=flow_time(clock, save, beta), steps=save, observables=series, particles=final,
                      eta_tau=clock, lr_attention=att * config.M * config.L, lr_mlp=mlp * config.M_mlp * config.L,
                      compile_s=compile_s, run_s=run_s, lr=dict(lr) if isinstance(lr, dict) else lr,
                      config=config, optimizer=optimizer, momentum=beta)
    bad = np.nonzero(~np.isfinite(series["Q"]))[0]
    if bad.size:
        k = int(save[bad[0]])
        message = (f"GD diverged: Q is not finite at step {k} (tau = {record.ts[bad[0]]:.6g}); last finite "
                   f"Q = {series['Q'][bad[0] - 1]:.6g} at step {int(save[bad[0] - 1])}; lower lr "
                   f"(the learning rate is lr M L = {record.lr_attention:.4g})" if bad[0] > 0 else
                   f"GD diverged: Q is not finite at step {k}")
        error = TrainingError(message, step=k, record=record)
        error.trajectory = record  # as every flows.FlowError
        raise error
    logger.info("train %s lr=%s momentum=%g steps=%d: compile %.2f s, run %.2f s", optimizer, lr, beta, steps,
                compile_s, run_s)
    return record


def train_gd(config: Config, eta_tau: float, steps: int, save_every: int = 1, *, particles=None,
             data: Prompts | None = None, test: Prompts | None = None, mesh=None,
             observables: str = "all") -> GDRecord:
    """Full-batch GD at flow-time step `eta_tau`: `train(config, "gd", lr=eta_tau, steps=steps, ...)`.

    Learning rates eta_tau M L (attention) and eta_tau M_mlp L (MLP) on the raw gradients of Q, so step k
    sits at flow time tau = k eta_tau and explicit Euler of the particle flow with step eta_tau is this run.
    `eta_tau` (> 0) and the other arguments as in `train`. **Returns:** a `GDRecord`.
    """
    eta_tau = _check_eta(eta_tau)
    return train(config, "gd", eta_tau, steps, save_every, particles=particles, data=data, test=test, mesh=mesh,
                 observables=observables)
