"""The particle velocity of the mean-field transformer: the first variation of Q and its adjoints.

In training time tau every particle moves with d theta/d tau = v(theta) (Gao et al., NeurIPS 2024),

    v_{V_{l,j}} = -M L dQ/dV_{l,j} = -sum_prompts grad_V <P_{2l+1}, V Z_{2l} S> - lam V_{l,j},

and likewise for W, W1, W2 (with M_mlp for the MLP), where P_k = dR/dZ_k is the discrete adjoint
(P_{2L} = (yhat - y)/n e_d e_N^T, P_k = P_{k+1} + (d_Z layer_k)^* P_{k+1}). `velocity(method="adjoint")`
computes it in that first-variation form: a forward pass storing Z_k, a backward pass for P_k
(vector-Jacobian products of the layer maps in Z only) and the per-particle gradients in closed matrix form
(derived in `derivations/mean_field.py`):

    grad_V  <P, V Z S>            = P (Z S)^T
    grad_W  <P, V Z S>            = Z G Z^T,   G = S * (B - 1 1^T (S * B)),  B = Z^T V^T P   (* entrywise)
    grad_W2 <P, W2 sigma(W1 Z)>   = P sigma(W1 Z)^T
    grad_W1 <P, W2 sigma(W1 Z)>   = ((W2^T P) * sigma'(W1 Z)) Z^T

`method="autodiff"` scales `jax.grad` of the objective; the tests hold the two against each other. Explicit
Euler in tau with step eta_tau is full-batch GD with learning rate eta_tau M L (attention) and
eta_tau M_mlp L (MLP): `network.train(config, "gd", lr=eta_tau, ...)`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._xla import jit as xla_jit
from .data import Config, Prompts
from .model import (
    GROUPS,
    ObjectiveInputs,
    attention_update,
    attention_vjp,
    check_data,
    check_particles,
    forward_states,
    huberized_relu,
    huberized_relu_grad,
    layer_scales,
    mlp_update,
    objective_value,
    traced_constants,
    weighted,
)

__all__ = [
    "adjoint_states",
    "particle_gradients",
    "probe_velocity",
    "velocity",
    "velocity_adjoint",
    "velocity_autodiff",
]


def particle_gradients(
    Z_att: jax.Array, P_att: jax.Array, Z_mlp: jax.Array, P_mlp: jax.Array, particles_l: tuple, threshold: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Closed-form gradients of sum_prompts <P, f> and <P, h> w.r.t. the particles of one layer.

    `Z_att` (n, D, K) is the input of the attention sublayer and `P_att` the adjoint of its output;
    likewise `Z_mlp`, `P_mlp` for the MLP sublayer; `particles_l` = (V, W, W1, W2) of the layer.
    Returns (gV, gW, gW1, gW2) with the particle shapes (module docstring for the formulas).
    """
    V, W, W1, W2 = particles_l
    _, gV, gW = attention_vjp(Z_att, V, W, P_att)
    pre = jnp.einsum("jd,ndk->njk", W1, Z_mlp)
    gW2 = jnp.einsum("nck,njk->jc", P_mlp, huberized_relu(pre, threshold))
    c = jnp.einsum("jc,nck->njk", W2, P_mlp) * huberized_relu_grad(pre, threshold)
    gW1 = jnp.einsum("njk,ndk->jd", c, Z_mlp)
    return gV, gW, gW1, gW2


def adjoint_states(
    particles: dict, Z0: jax.Array, y: jax.Array, threshold: jax.Array, d: jax.Array, weights: dict | None = None
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(Z_att, Z_mlp, P_att, P_mlp), each (L, n, D, K): the input of every sublayer (Z_{2l}, Z_{2l+1}) and
    the adjoint P = dR/dZ of its output (P_att of Z_{2l+1}, P_mlp of Z_{2l+2}), by a backward scan of
    vector-Jacobian products of the layer maps in Z (P_{2L} = (yhat - y)/n e_d e_N^T). `weights`: relative
    atom weights (`model.weighted`)."""
    particles = weighted(particles, weights)
    sa, sm = layer_scales(particles)
    Z_final, Z_att, Z_mlp = forward_states(particles, Z0, threshold)
    err = (Z_final[:, d, -1] - y) / Z0.shape[0]
    P_final = jnp.zeros_like(Z_final).at[:, d, -1].set(err)

    def back(P, xs):
        Za, Zm, V, W, W1, W2 = xs
        _, vjp_m = jax.vjp(lambda Z: Z + sm * mlp_update(Z, W1, W2, threshold), Zm)
        (P_att,) = vjp_m(P)  # adjoint of Z_{2l+1}
        _, vjp_a = jax.vjp(lambda Z: Z + sa * attention_update(Z, V, W), Za)
        (P_in,) = vjp_a(P_att)  # adjoint of Z_{2l}
        return P_in, (P_att, P)

    xs = (Z_att, Z_mlp) + tuple(particles[k] for k in GROUPS)
    _, (P_att, P_mlp) = jax.lax.scan(back, P_final, xs, reverse=True)
    return Z_att, Z_mlp, P_att, P_mlp


def velocity_adjoint(particles: dict, *inputs: *ObjectiveInputs) -> dict:
    """-(M L) dQ/dtheta per attention particle and -(M_mlp L) dQ/dw per MLP particle (first variation): the
    velocity field `probe_velocity` at the particles themselves."""
    return probe_velocity(particles, *inputs, probes=particles)


def probe_velocity(particles: dict, *inputs: *ObjectiveInputs, probes: dict, weights: dict | None = None) -> dict:
    """-grad delta Q/delta rho at probe particles: the velocity field of the Wasserstein gradient flow of the
    law given by `particles` (with `weights`), evaluated anywhere.

    **Arguments:**

    - `inputs`: (Z0, y, lam, threshold, d), as in `model.objective_value` (whose first variation this is).
    - `probes`: a particle dict `{"V": (L, P, D, D), "W": (L, P, D, D), "W1": (L, Pm, D), "W2": (L, Pm, D)}`
      (probe j of layer l sits at depth slice l; P and Pm may be 0).
    - `weights`: relative atom weights of `particles` (`model.weighted`).

    **Returns:** the dict of -grad_theta g(theta, t_l) - lam theta at the probes, with g the data part of the
    first variation (`observables.first_variation`): at the particles themselves (`probes = particles`, no
    weights) it is `velocity_adjoint`.
    """
    Z0, y, lam, threshold, d = inputs
    Z_att, Z_mlp, P_att, P_mlp = adjoint_states(particles, Z0, y, threshold, d, weights)
    layers = tuple(probes[k] for k in GROUPS)
    grads = jax.vmap(particle_gradients, in_axes=(0, 0, 0, 0, 0, None))(Z_att, P_att, Z_mlp, P_mlp, layers, threshold)
    return {k: -g - lam * probes[k] for k, g in zip(GROUPS, grads, strict=True)}


def velocity_autodiff(particles: dict, *inputs: *ObjectiveInputs, rev: bool = True) -> dict:
    """-(M L) dQ/dtheta by reverse-mode AD of `model.objective_value(particles, *inputs, rev=rev)`.

    **Arguments:** `inputs`: (Z0, y, lam, threshold, d), documented at `model.objective_value`
    (`observables.objective_inputs` of a `make_args` dict); `rev=False` keeps the velocity differentiable in
    forward mode (implicit solvers need its Jacobian).
    """
    L, M = particles["V"].shape[:2]
    Mm = particles["W1"].shape[1]
    g = jax.grad(objective_value)(particles, *inputs, rev=rev)
    scale = {"V": M * L, "W": M * L, "W1": Mm * L, "W2": Mm * L}
    return {k: -scale[k] * g[k] for k in GROUPS}


_METHODS = {"adjoint": xla_jit(velocity_adjoint), "autodiff": xla_jit(velocity_autodiff, static_argnames=("rev",))}


def velocity(config: Config, particles: dict, data: Prompts, method: str = "autodiff") -> dict:
    """The mean-field velocity of every particle (a dict shaped like the particles).

    v = -M L dQ/d theta (attention), -M_mlp L dQ/d w (MLP) = -grad delta Q/delta rho at the particle.

    **Arguments:**

    - `method`: `"autodiff"` (default, what the flow integrates) scales reverse-mode `jax.grad(objective)`;
      `"adjoint"` evaluates the first-variation form of the module docstring (adjoints P_k, closed-form
      per-particle gradients). The two agree to rounding (tests); autodiff is the faster one on CPU, because
      it reuses the forward pass.
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {tuple(_METHODS)}, got {method!r}")
    particles, data = check_particles(config, particles), check_data(config, data)
    return _METHODS[method](particles, data.Z0, data.y, *traced_constants(config, data.Z0.dtype))
