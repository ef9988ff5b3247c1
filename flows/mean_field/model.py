"""The finite mean-field transformer of Gao et al. (NeurIPS 2024, eqs. 2.1-2.3): forward pass, risk, objective.

Depth L, M attention heads and M_mlp neurons per layer; for l = 0..L-1 and every prompt Z in R^{D x (N+1)}

    Z_{2l+1} = Z_{2l}   + 1/(M L)     sum_j V_{l,j} Z_{2l} S(Z_{2l}, W_{l,j}),   S = softmax_keys(Z^T W Z)  (2.1)
    Z_{2l+2} = Z_{2l+1} + 1/(M_mlp L) sum_j W2_{l,j} sigma(W1_{l,j} Z_{2l+1})                          (2.2)

(column i of Z S is sum_k z_k softmax_k(z_k^T W z_i); W1 a row 1 x D, W2 a column D x 1, sigma the
HuberizedReLU of the rebuttal's Eq 2 with threshold h0). The prediction is yhat = Z_{2L}[d, N], the
risk R = mean over prompts of (yhat - y)^2 / 2, and the objective (2.3)

    Q = R + lam/(2 M L) sum_{l,j} (|V_{l,j}|^2 + |W_{l,j}|^2) + lam/(2 M_mlp L) sum_{l,j} (|W1_{l,j}|^2 + |W2_{l,j}|^2).

**Particles** are stored as `{"V": (L, M, D, D), "W": (L, M, D, D), "W1": (L, M_mlp, D), "W2": (L, M_mlp, D)}`;
the widths and the depth are read from these shapes, so one compiled function serves every config of a shape.
The array-level functions (`predict`, `risk_value`, `objective_value`) take lam, the threshold and d as
traced arrays (`traced_constants`); `forward`, `risk`, `objective` validate against a `Config` first.

**A law as weighted atoms.** Every function of the forward pass also takes `weights`, relative weights
`{"attention": (L, M), "mlp": (L, M_mlp)}` of the atoms: the law of depth slice l is
(1/M) sum_j m_{l,j} delta_{theta_{l,j}} (a probability law when the weights of a slice average 1), so the
sublayer sums and the weight decay of (2.1)-(2.3) become sum_j m_{l,j} f(Z, theta_{l,j}) / (M L) and
lam/(2 M L) sum_{l,j} m_{l,j} |theta_{l,j}|^2. Particles are the weights 1 (`weights=None`, the same numbers
bit for bit); a density on a grid is its cell masses times the number of cells, at the cell centres.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Float

from .._checks import check_finite_tree
from .._xla import jit as xla_jit
from .data import Config, Prompts

__all__ = [
    "ATTENTION",
    "GROUPS",
    "MLP",
    "ObjectiveInputs",
    "RiskInputs",
    "as_array",
    "attention_update",
    "attention_update_rev",
    "attention_vjp",
    "check_data",
    "check_group_shapes",
    "check_particles",
    "check_weights",
    "decay",
    "forward",
    "forward_states",
    "group_arrays",
    "group_weighted",
    "huberized_relu",
    "huberized_relu_grad",
    "layer_scales",
    "mlp_update",
    "objective",
    "objective_value",
    "predict",
    "risk",
    "risk_value",
    "traced_constants",
    "weighted",
]

#: The particle groups, in the order of the depth scan; the attention and the MLP groups.
GROUPS = ("V", "W", "W1", "W2")
ATTENTION = ("V", "W")
MLP = ("W1", "W2")

#: (Z0, y, lam, threshold, d): the arguments after the particles of `objective_value`, which the velocities
#: (`gradients.velocity_autodiff`, `gradients.probe_velocity`) and the charted model pass on.
ObjectiveInputs = tuple[jax.Array, jax.Array, jax.Array | float, jax.Array, jax.Array]
#: (Z0, y, threshold, d): those of `risk_value`.
RiskInputs = tuple[jax.Array, jax.Array, jax.Array, jax.Array]


# --------------------------------------------------------------------------- the two encoders


def huberized_relu(z: jax.Array, threshold: jax.Array | float = 1.0) -> jax.Array:
    """sigma(z) = 0 for z <= 0, z^2/(2 h0) for 0 < z <= h0, z - h0/2 for z > h0 (rebuttal Eq 2, h0 = 1)."""
    pos = jnp.maximum(z, 0.0)
    return jnp.where(z > threshold, z - 0.5 * threshold, 0.5 * pos * pos / threshold)


def huberized_relu_grad(z: jax.Array, threshold: jax.Array | float = 1.0) -> jax.Array:
    """sigma'(z) = 0, z/h0, 1 on the three pieces (continuous: sigma is C^1)."""
    return jnp.clip(z / threshold, 0.0, 1.0)


def _attention_parts(Z, V, W):
    """(update, S, VZ) of `attention_update` in the heads-last layout:
    S[n, i, k, m] = softmax_k(z_k^T W_m z_i) (query i, key k, head m), VZ[n, k, m, c] = (V_m z_k)[c],
    update[n, c, i] = sum_{k, m} S[n, i, k, m] VZ[n, k, m, c]."""
    n, D, K = Z.shape
    M = V.shape[0]
    # every logit z_k^T W_m z_i is one row of a single (n K^2, D^2) x (D^2, M) GEMM, heads last: XLA on CPU
    # runs one large GEMM fast and many small batched products slowly
    pairs = jnp.einsum("ndk,nei->nikde", Z, Z).reshape(n * K * K, D * D)
    S = jax.nn.softmax((pairs @ W.reshape(M, D * D).T).reshape(n, K, K, M), axis=2)
    VZ = jnp.einsum("ndk,mcd->nkmc", Z, V)
    # written (n, query, c), the order of XLA's batched GEMM: only the small result is transposed
    update = jnp.swapaxes(jnp.einsum("nix,nxc->nic", S.reshape(n, K, K * M), VZ.reshape(n, K * M, D)), 1, 2)
    return update, S, VZ


def attention_update(
    Z: Float[jax.Array, "n D K"], V: Float[jax.Array, "M D D"], W: Float[jax.Array, "M D D"]
) -> Float[jax.Array, "n D K"]:
    """sum_j f(Z, (V_j, W_j)) = sum_j V_j Z S(Z, W_j) for Z (n, D, K), V and W (M, D, D) -> (n, D, K).

    The caller scales by 1/(M L). Each term is the rebuttal's Eq 1, f(Z, theta) = V Z softmax(Z^T W Z).
    Differentiable in every mode; `attention_update_rev` is the same map with a hand-written reverse rule.
    """
    return _attention_parts(Z, V, W)[0]


def attention_vjp(
    Z: Float[jax.Array, "n D K"],
    V: Float[jax.Array, "M D D"],
    W: Float[jax.Array, "M D D"],
    P: Float[jax.Array, "n D K"],
) -> tuple[Float[jax.Array, "n D K"], Float[jax.Array, "M D D"], Float[jax.Array, "M D D"]]:
    """(dZ, dV, dW) of <P, attention_update(Z, V, W)> in closed form (`derivations/mean_field.py`):
    dV = sum_n P (Z S)^T, dW = sum_n Z G Z^T with G = S * (B - 1 1^T (S * B)), B = Z^T V^T P.

    Every product over the (n, K, K, M) tensors is a GEMM of operands in their stored order: XLA on CPU
    transposed the large operand of the equivalent einsums first, which cost several times the product.
    """
    n, D, K = Z.shape
    M = V.shape[0]
    _, S, VZ = _attention_parts(Z, V, W)
    PT = jnp.swapaxes(P, 1, 2)  # (n, query i, c)
    dVZ = jnp.einsum("nix,nic->nxc", S.reshape(n, K, K * M), PT).reshape(n * K, M * D)  # rows (n, k), cols (m, c)
    dS = jnp.einsum("nxc,nic->nix", VZ.reshape(n, K * M, D), PT).reshape(n, K, K, M)
    G = (S * (dS - jnp.sum(S * dS, axis=2, keepdims=True))).reshape(n * K * K, M)  # d logits
    pairs_t = jnp.einsum("ndk,nei->denik", Z, Z).reshape(D * D, n * K * K)
    dW = (pairs_t @ G).T.reshape(M, D, D)
    dZZ = (G @ W.reshape(M, D * D)).reshape(n, K, K, D, D)
    ZT = jnp.swapaxes(Z, 1, 2).reshape(n * K, D)
    dZ = (
        jnp.einsum("nikde,nei->ndk", dZZ, Z)
        + jnp.einsum("nikde,ndk->nei", dZZ, Z)
        + jnp.swapaxes((dVZ @ V.reshape(M * D, D)).reshape(n, K, D), 1, 2)
    )
    dV = (dVZ.T @ ZT).reshape(M, D, D)
    return dZ, dV, dW


# Speed: keeping only (Z, V, W) and recomputing S in `attention_vjp` compiles faster than autodiff through
# the softmax (row `workarounds/attention_vjp(mean_field.train)` of benchmarks/results/workarounds.json).
@jax.custom_vjp
def attention_update_rev(Z: jax.Array, V: jax.Array, W: jax.Array) -> jax.Array:
    """`attention_update` with the reverse-mode rule `attention_vjp` (no forward-mode AD); equal to
    autodiff of `attention_update` to rounding (tests)."""
    return attention_update(Z, V, W)


attention_update_rev.defvjp(
    lambda Z, V, W: (attention_update(Z, V, W), (Z, V, W)), lambda res, P: attention_vjp(res[0], res[1], res[2], P)
)


def mlp_update(
    Z: Float[jax.Array, "n D K"],
    W1: Float[jax.Array, "M_mlp D"],
    W2: Float[jax.Array, "M_mlp D"],
    threshold: jax.Array | float = 1.0,
) -> Float[jax.Array, "n D K"]:
    """sum_j h(Z, (W1_j, W2_j)) = sum_j W2_j sigma(W1_j Z) for Z (n, D, K), W1 and W2 (M_mlp, D)."""
    pre = jnp.einsum("jd,ndk->njk", W1, Z)
    return jnp.einsum("jc,njk->nck", W2, huberized_relu(pre, threshold))


# --------------------------------------------------------------------------- validation


def as_array(name: str, value: Any) -> jax.Array:
    """`jnp.asarray(value)`, or a ValueError naming `name` for what is not a numeric array."""
    try:
        return jnp.asarray(value)
    except (TypeError, ValueError, OverflowError) as err:
        raise ValueError(f"{name} must be a numeric array, got {type(value).__name__}") from err


def group_arrays(label: str, value: Any) -> dict:
    """`value` as a dict of arrays, one per particle group (`GROUPS`): a ValueError naming `label` (or
    `label[group]`) for another dict or what is not a numeric array."""
    if not isinstance(value, dict) or set(value) != set(GROUPS):
        raise ValueError(
            f"{label} must be a dict with keys {GROUPS}, got "
            f"{sorted(value) if isinstance(value, dict) else type(value).__name__}"
        )
    return {name: as_array(f"{label}[{name!r}]", value[name]) for name in GROUPS}


def check_group_shapes(label: str, arrays: dict, want: dict, sizes: str) -> dict:
    """`arrays` (from `group_arrays`) with the shapes `want` (group -> shape; the message names the `sizes` that
    set them), floating point and finite; a ValueError naming `label[group]` otherwise."""
    for name in GROUPS:
        arr = arrays[name]
        if arr.shape != want[name]:
            raise ValueError(f"{label}[{name!r}] must have shape {want[name]} ({sizes}), got {arr.shape}")
        if not jnp.issubdtype(arr.dtype, jnp.floating):
            raise ValueError(f"{label}[{name!r}] must be floating point, got {arr.dtype}")
        check_finite_tree(f"{label}[{name!r}]", arr)
    return arrays


def check_particles(config: Config, particles: dict) -> dict:
    """Validate a particle dict against `config` (keys, shapes, finiteness); returns it as arrays."""
    arrays = group_arrays("particles", particles)
    L, D, M, Mm = config.L, config.D, config.M, config.M_mlp
    want = {"V": (L, M, D, D), "W": (L, M, D, D), "W1": (L, Mm, D), "W2": (L, Mm, D)}
    return check_group_shapes("particles", arrays, want, f"config L={L}, M={M}, M_mlp={Mm}, D={D}")


def check_data(config: Config, data: Any, name: str = "data") -> Prompts:
    """`data` (a `Prompts` or a pair) validated against `config`; errors name the argument `name`."""
    if not isinstance(data, Prompts):
        if isinstance(data, tuple) and len(data) == 2:
            data = Prompts(*data)
        else:
            raise ValueError(f"{name} must be a flows.mean_field.Prompts(Z0, y)")
    Z0, y = as_array(f"{name}.Z0", data.Z0), as_array(f"{name}.y", data.y)
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


def layer_scales(particles: dict) -> tuple[float, float]:
    """(1/(M L), 1/(M_mlp L)): the weights of the attention and the MLP sublayers, read from the shapes."""
    L, M = particles["V"].shape[:2]
    Mm = particles["W1"].shape[1]
    return 1.0 / (M * L), 1.0 / (Mm * L)


def group_weighted(values: dict, scales: tuple, reduce: Callable = lambda x: jnp.sum(x * x)) -> jax.Array:
    """scales[0] sum over the attention groups + scales[1] sum over the MLP groups of `reduce(values[k])`
    (default |.|^2): the weight decay of (2.3), the dissipation and the coupled distance of the observables."""
    att = sum(reduce(values[k]) for k in ATTENTION)
    mlp = sum(reduce(values[k]) for k in MLP)
    return scales[0] * att + scales[1] * mlp


def weighted(particles: dict, weights: dict | None) -> dict:
    """The particles whose unweighted sublayer sums are the weighted ones: every f and h is linear in V and in
    W2 (partial 1-homogeneity), so m f(Z, (V, W)) = f(Z, (m V, W)) and m h(Z, (W1, W2)) = h(Z, (W1, m W2)).
    `weights=None` returns the particles themselves."""
    if weights is None:
        return particles
    att, mlp = weights["attention"], weights["mlp"]
    return {
        "V": particles["V"] * att[:, :, None, None],
        "W": particles["W"],
        "W1": particles["W1"],
        "W2": particles["W2"] * mlp[:, :, None],
    }


def forward_states(
    particles: dict, Z0: jax.Array, threshold: jax.Array, rev: bool = False, weights: dict | None = None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(Z_{2L}, Z_in_attention (L, n, D, K), Z_in_mlp (L, n, D, K)) of eqs. (2.1)-(2.2). `rev=True` uses
    `attention_update_rev` (faster gradients; no forward-mode AD); `weights` as in the module docstring."""
    particles = weighted(particles, weights)
    sa, sm = layer_scales(particles)
    attention = attention_update_rev if rev else attention_update

    def layer(Z, p):
        V, W, W1, W2 = p
        Z1 = Z + sa * attention(Z, V, W)
        Z2 = Z1 + sm * mlp_update(Z1, W1, W2, threshold)
        return Z2, (Z, Z1)

    Z_final, (Z_att, Z_mlp) = jax.lax.scan(layer, Z0, tuple(particles[k] for k in GROUPS))
    return Z_final, Z_att, Z_mlp


def predict(
    particles: dict, Z0: jax.Array, threshold: jax.Array, d: jax.Array, rev: bool = False, weights: dict | None = None
) -> jax.Array:
    """yhat = Z_{2L}[d, N] of every prompt."""
    return forward_states(particles, Z0, threshold, rev, weights)[0][:, d, -1]


def decay(particles: dict, lam: jax.Array | float, weights: dict | None = None) -> jax.Array:
    """lam/(2 M L) sum (|V|^2 + |W|^2) + lam/(2 M_mlp L) sum (|W1|^2 + |W2|^2) (with `weights`, every term
    times its atom's weight)."""
    if weights is None:
        return 0.5 * lam * group_weighted(particles, layer_scales(particles))
    m = {"V": weights["attention"], "W": weights["attention"], "W1": weights["mlp"], "W2": weights["mlp"]}
    terms = {
        k: m[k].reshape(m[k].shape + (1,) * (particles[k].ndim - 2)) * (particles[k] * particles[k]) for k in GROUPS
    }
    return 0.5 * lam * group_weighted(terms, layer_scales(particles), jnp.sum)


def risk_value(
    particles: dict,
    Z0: jax.Array,
    y: jax.Array,
    threshold: jax.Array,
    d: jax.Array,
    rev: bool = False,
    weights: dict | None = None,
) -> jax.Array:
    """R = mean (yhat - y)^2 / 2."""
    err = predict(particles, Z0, threshold, d, rev, weights) - y
    return 0.5 * jnp.mean(err * err)


def objective_value(
    particles: dict,
    Z0: jax.Array,
    y: jax.Array,
    lam: jax.Array | float,
    threshold: jax.Array,
    d: jax.Array,
    rev: bool = False,
    weights: dict | None = None,
) -> jax.Array:
    """Q = R + the weight decay (2.3)."""
    return risk_value(particles, Z0, y, threshold, d, rev, weights) + decay(particles, lam, weights)


def traced_constants(config: Config, dtype: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(lam, threshold, d) as arrays: traced arguments of the jitted evaluations (new values do not recompile)."""
    return (jnp.asarray(config.lam, dtype), jnp.asarray(config.threshold, dtype), jnp.asarray(config.d, jnp.int32))


# One jitted program per shape: called eagerly, the depth `lax.scan` would be traced and compiled on every call.
_predict_jit = xla_jit(predict, static_argnames=("rev",))
_risk_jit = xla_jit(risk_value, static_argnames=("rev",))
_objective_jit = xla_jit(objective_value, static_argnames=("rev",))


def check_weights(config: Config, weights: dict | None) -> dict | None:
    """Validate relative atom weights against `config` (module docstring): `None`, or a dict with keys
    "attention" (L, M) and "mlp" (L, M_mlp) of finite non-negative floats; returns them as arrays."""
    if weights is None:
        return None
    if not isinstance(weights, dict) or set(weights) != {"attention", "mlp"}:
        raise ValueError("weights must be None or a dict with keys 'attention' and 'mlp'")
    want = {"attention": (config.L, config.M), "mlp": (config.L, config.M_mlp)}
    out = {}
    for name, shape in want.items():
        arr = as_array(f"weights[{name!r}]", weights[name])
        if arr.shape != shape:
            raise ValueError(f"weights[{name!r}] must have shape {shape}, got {arr.shape}")
        if not jnp.issubdtype(arr.dtype, jnp.floating):
            raise ValueError(f"weights[{name!r}] must be floating point, got {arr.dtype}")
        check_finite_tree(f"weights[{name!r}]", arr)
        if bool(jnp.any(arr < 0)):
            raise ValueError(f"weights[{name!r}] must be >= 0")
        out[name] = arr
    return out


def forward(config: Config, particles: dict, Z0: jax.Array, weights: dict | None = None) -> jax.Array:
    """yhat = Z_{2L}[d, N] for prompts `Z0 (n, D, N + 1)` -> `(n,)` (`weights`: module docstring)."""
    particles, weights = check_particles(config, particles), check_weights(config, weights)
    Z0 = check_data(config, Prompts(Z0, jnp.zeros(jnp.shape(Z0)[:1], jnp.result_type(Z0)))).Z0
    _, threshold, d = traced_constants(config, Z0.dtype)
    if weights is not None:
        return _predict_jit(particles, Z0, threshold, d, weights=weights)
    return _predict_jit(particles, Z0, threshold, d)


def risk(config: Config, particles: dict, data: Prompts, weights: dict | None = None) -> jax.Array:
    """R = mean over prompts of (yhat - y)^2 / 2 (a scalar; `weights`: module docstring)."""
    particles, data = check_particles(config, particles), check_data(config, data)
    weights = check_weights(config, weights)
    _, threshold, d = traced_constants(config, data.Z0.dtype)
    if weights is not None:
        return _risk_jit(particles, data.Z0, data.y, threshold, d, weights=weights)
    return _risk_jit(particles, data.Z0, data.y, threshold, d)


def objective(config: Config, particles: dict, data: Prompts, weights: dict | None = None) -> jax.Array:
    """Q = R + lam/(2 M L) sum(|V|^2 + |W|^2) + lam/(2 M_mlp L) sum(|W1|^2 + |W2|^2) (eq. 2.3; `weights`:
    module docstring)."""
    particles, data = check_particles(config, particles), check_data(config, data)
    weights = check_weights(config, weights)
    if weights is not None:
        return _objective_jit(particles, data.Z0, data.y, *traced_constants(config, data.Z0.dtype), weights=weights)
    return _objective_jit(particles, data.Z0, data.y, *traced_constants(config, data.Z0.dtype))
