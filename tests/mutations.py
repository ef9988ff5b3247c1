"""Mutation check: do the default tests fail when the physics is wrong?

Each entry of `MUTATIONS` is one small deliberate mistake in one line of physics (a dropped factor, a swapped
sign, a changed exponent, a wrong clock). The script copies the repository (tracked and untracked, not ignored
files) into a scratch folder, first runs every listed test file there unmutated (they must pass, else the check
means nothing), then applies each mutation alone and runs the default-suite tests named for it (`-m "not slow"`
from setup.cfg, stopping at the first failure). A mutation is **killed** when those tests fail, **survived**
when they pass. The working tree is never modified.

    python tests/mutations.py --jobs 2        # every mutation, two at a time; table on stdout
    python tests/mutations.py --only co-S-2m1 ss-h-1/K
    python tests/mutations.py --json out/mutations.json
    pytest -m slow tests/test_mutations.py    # the same, as a (slow) test: every mutation must be killed

Not part of the default suite: a full run is one test run per mutation (about 20-60 s each on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass(frozen=True)
class Mutation:
    id: str
    path: str  # file relative to the repository root
    old: str  # text that must occur exactly once in the file
    new: str
    tests: tuple[str, ...]  # test files (default suite) that must catch it
    what: str


SS = ("tests/scan_snap/test_pins.py", "tests/scan_snap/test_flow.py")
SS_THEORY = (
    "tests/scan_snap/test_theory_closed_forms.py",
    "tests/scan_snap/test_pins.py",
    "tests/scan_snap/test_flow.py",
)
SS_NET = ("tests/scan_snap/test_network.py", "tests/scan_snap/test_pins_clock.py")
SS_OBS = ("tests/scan_snap/test_observables.py", "tests/scan_snap/test_pins.py")
CO = ("tests/cooccurrence/test_flow.py", "tests/cooccurrence/test_pins.py")
CO_RED = ("tests/cooccurrence/test_reduced.py", "tests/cooccurrence/test_pins_reduced.py")
SOLVE = ("tests/test_solve_pins.py", "tests/test_solve.py")
OM_ODE = ("tests/optim_limits/test_sign_pins.py", "tests/optim_limits/test_ode.py")
OM_SDE = ("tests/optim_limits/test_noise.py",)
MF = ("tests/mean_field/test_network.py", "tests/mean_field/test_flow.py", "tests/mean_field/test_observables.py")

MUTATIONS: tuple[Mutation, ...] = (
    # --- Scan and Snap: the full (Y, Z) flow --------------------------------------------------------------
    Mutation(
        "ss-Ydot-rate",
        "flows/scan_snap/flow.py",
        'Y_dot = args["eta_Y"] * (pf.T @ resid)',
        'Y_dot = args["eta_Z"] * (pf.T @ resid)',
        SS,
        "full flow: Y moves at eta_Z instead of eta_Y",
    ),
    Mutation(
        "ss-resid-sign",
        "flows/scan_snap/flow.py",
        'resid = args["E"] - alpha  #',
        'resid = alpha - args["E"]  #',
        SS,
        "full flow: e_n - alpha_n sign flipped (ascent)",
    ),
    Mutation(
        "ss-Zdot-no-perp",
        "flows/scan_snap/flow.py",
        "perp = g - f * jnp.sum(f * g, axis=-1, keepdims=True)",
        "perp = g",
        SS,
        "full flow: projection P^perp_{f_n} dropped",
    ),
    Mutation(
        "ss-Zdot-weights",
        "flows/scan_snap/flow.py",
        'Z_dot = args["eta_Z"] * (args["Q"].T @ (pf * perp))',
        'Z_dot = args["eta_Z"] * (args["Q"].T @ (f * perp))',
        SS,
        "full flow: class probabilities P(n) dropped from the Z-equation",
    ),
    # --- Scan and Snap: the reduced Z-flow and the h-flow --------------------------------------------------
    Mutation(
        "ss-h-1/K",
        "flows/scan_snap/flow.py",
        "return eta_Y / (K * ((M - 1.0) + jnp.exp(M * h)))",
        "return eta_Y / ((M - 1.0) + jnp.exp(M * h))",
        SS,
        "h-flow (reduced and symmetric flows): h = h(t/K) loses its 1/K",
    ),
    Mutation(
        "ss-h-M-1",
        "flows/scan_snap/flow.py",
        "return eta_Y / (K * ((M - 1.0) + jnp.exp(M * h)))",
        "return eta_Y / (K * (M + jnp.exp(M * h)))",
        SS,
        "h-flow: (M - 1) -> M in the h-equation",
    ),
    Mutation(
        "ss-gamma-square",
        "flows/scan_snap/theory.py",
        "return (M - 1.0) ** 2 * h * e / ((M - 1.0) * e + 1.0)",
        "return (M - 1.0) * h * e / ((M - 1.0) * e + 1.0)",
        SS_THEORY,
        "gamma(h) (the reduced flows and the closed form gamma(t)): (M-1)^2 -> (M-1)",
    ),
    Mutation(
        "ss-reduced-w",
        "flows/scan_snap/flow.py",
        'rows = (args["w"] * gamma)[:, None] * f * perp',
        "rows = gamma * f * perp",
        SS,
        "reduced flow: class weights w_n dropped",
    ),
    Mutation(
        "ss-B-rate",
        "flows/scan_snap/flow.py",
        'B_dot = args["eta_Z"] * args["w"] * xi',
        'B_dot = args["eta_Y"] * args["w"] * xi',
        SS,
        "reduced flow: B_n integrates at eta_Y instead of eta_Z",
    ),
    Mutation(
        "ss-paper-time",
        "flows/scan_snap/flow.py",
        "weights = p if (exact_slaving or not paper_time) else K * p",
        "weights = p if (exact_slaving or not paper_time) else p",
        SS,
        "time convention: paper time w_n = K P(n) -> P(n)",
    ),
    Mutation(
        "ss-slaving-scale",
        "flows/scan_snap/flow.py",
        'a["center"], a["scale"] = (1.0, (Md / (Md - 1.0)) ** 2) if exact_slaving',
        'a["center"], a["scale"] = (1.0, Md / (Md - 1.0)) if exact_slaving',
        SS,
        "exact slaving: (M/(M-1))^2 -> M/(M-1)",
    ),
    Mutation(
        "ss-single-ct-exp",
        "flows/scan_snap/flow.py",
        'rate = args["eta_Z"] * gamma_of_h(h, M) * jnp.exp(4.0 * z) / args["C0"]',
        'rate = args["eta_Z"] * gamma_of_h(h, M) * jnp.exp(2.0 * z) / args["C0"]',
        SS_THEORY,
        "single common token (eq. 13): e^{4z} -> e^{2z}",
    ),
    # --- Scan and Snap: closed forms ------------------------------------------------------------------------
    Mutation(
        "th-h-M",
        "flows/scan_snap/theory.py",
        "a = M * eta_Y * t",
        "a = eta_Y * t",
        SS_THEORY,
        "h(t): M eta_Y t -> eta_Y t in eq. 45",
    ),
    Mutation(
        "th-h-scale",
        "flows/scan_snap/theory.py",
        "    return x / M\n",
        "    return x\n",
        SS_THEORY,
        "h(t): x = M h not divided by M",
    ),
    Mutation(
        "th-gamma-1/K",
        "flows/scan_snap/theory.py",
        "hv = h(_float(t) / _float(K), M, eta_Y)\n    return gamma_of_h(",
        "hv = h(_float(t), M, eta_Y)\n    return gamma_of_h(",
        SS_THEORY,
        "gamma(t): h(t/K) -> h(t)",
    ),
    Mutation(
        "th-Gamma-half",
        "flows/scan_snap/theory.py",
        "* hv**2 / 2",
        "* hv**2",
        SS_THEORY,
        "Gamma(t) (eq. 128): factor 1/2 dropped",
    ),
    Mutation(
        "th-Gamma-rates",
        "flows/scan_snap/theory.py",
        "return _float(eta_Z) / _float(eta_Y) * _float(K)",
        "return _float(eta_Y) / _float(eta_Z) * _float(K)",
        SS_THEORY,
        "Gamma(t): eta_Z / eta_Y inverted",
    ),
    Mutation(
        "th-B-quarter",
        "flows/scan_snap/theory.py",
        "return jnp.log1p(4 * G / C0) / 4",
        "return jnp.log1p(4 * G / C0) / 2",
        SS_THEORY,
        "B_n(t) (eq. 129): 1/4 -> 1/2",
    ),
    Mutation(
        "th-scan-time-K",
        "flows/scan_snap/theory.py",
        "return _float(K) * jnp.log(_float(M)) / _float(eta_Y)",
        "return jnp.log(_float(M)) / _float(eta_Y)",
        SS_THEORY,
        "scan time K ln M / eta_Y loses K",
    ),
    Mutation(
        "th-chi-2f0",
        "flows/scan_snap/theory.py",
        "jnp.exp(2 * f0_sq * B_n)",
        "jnp.exp(f0_sq * B_n)",
        SS_THEORY,
        "chi sandwich lower bound: e^{2 f^2 B} -> e^{f^2 B}",
    ),
    Mutation(
        "th-pair-r0",
        "flows/scan_snap/theory.py",
        "(_float(r0) + 1) * jnp.expm1(-2 * _float(dz_lp))",
        "_float(r0) * jnp.expm1(-2 * _float(dz_lp))",
        SS_THEORY,
        "pair invariant (eq. 110): r0 + 1 -> r0",
    ),
    Mutation(
        "th-h-discrete",
        "flows/scan_snap/theory.py",
        "nxt = hs + eta_Y / ((M - 1) + jnp.exp(M * hs))",
        "nxt = hs + eta_Y / (M + jnp.exp(M * hs))",
        SS_THEORY,
        "discrete h recursion (eq. 33): M-1 -> M",
    ),
    Mutation(
        "dec-alpha",
        "flows/scan_snap/decoder.py",
        "return 1.0 / (1.0 + (M - 1) * jnp.exp(-M * h))",
        "return 1.0 / (1.0 + M * jnp.exp(-M * h))",
        ("tests/scan_snap/test_decoder.py",),
        "target probability (Lemma 5): M-1 -> M",
    ),
    # --- Scan and Snap: network clock and observables ---------------------------------------------------------
    Mutation(
        "ss-momentum-clock",
        "flows/scan_snap/network.py",
        "kw |= dict(momentum=momentum, batch_loss=losses,",
        "kw |= dict(momentum=0.0, batch_loss=losses,",
        SS_NET,
        "time convention: momentum SGD clock step/(1-beta) -> step",
    ),
    Mutation(
        "ss-attention-law",
        "flows/scan_snap/observables.py",
        "w = weights * jnp.exp(jnp.where(on, zq - zmax, 0.0))",
        "w = jnp.where(on, jnp.exp(zq - zmax), 0.0)",
        SS_NET + SS_OBS,
        "attention (eq. 5): the weights P(l|n) (or the counts N) dropped from the softmax",
    ),
    Mutation(
        "ss-ce-target",
        "flows/scan_snap/observables.py",
        "return jax.nn.logsumexp(logits, axis=-1) - picked",
        "return jax.nn.logsumexp(logits, axis=-1) - jnp.max(logits, axis=-1)",
        SS_NET + SS_OBS,
        "cross-entropy of the most likely token instead of the next token n",
    ),
    Mutation(
        "ss-count-normalise",
        "flows/scan_snap/network.py",
        'obs.cross_entropy(obs.normalized_attention(u) @ params["Y"], arrays.next_token[cls])',
        'obs.cross_entropy(u @ params["Y"], arrays.next_token[cls])',
        SS_NET,
        "count-vector loss: f = X^T b / ||X^T b|| not normalised",
    ),
    Mutation(
        "ss-blowup-bound",
        "flows/scan_snap/network.py",
        "return float(np.log(np.finfo(np.dtype(dtype)).max))",
        "return float(np.finfo(np.dtype(dtype)).max)",
        ("tests/test_silent_surprises.py",),
        "failed run: Y, Z accepted up to the largest float instead of its log",
    ),
    Mutation(
        "ss-entropy-sign",
        "flows/scan_snap/observables.py",
        "def _plogp(p):\n",
        "def _plogp(p):\n    p = jnp.sqrt(p)\n",
        SS_OBS,
        "attention entropy computed from sqrt(c)",
    ),
    # --- co-occurrence: the Gram ODE ------------------------------------------------------------------------
    Mutation(
        "co-c-sign",
        "flows/cooccurrence/flow.py",
        "c = jax.nn.sigmoid(-labels * F) * labels / n",
        "c = jax.nn.sigmoid(labels * F) * labels / n",
        CO,
        "g_i = 1/(1 + e^{y F}) -> 1/(1 + e^{-y F})",
    ),
    Mutation(
        "co-c-1/n",
        "flows/cooccurrence/flow.py",
        "c = jax.nn.sigmoid(-labels * F) * labels / n",
        "c = jax.nn.sigmoid(-labels * F) * labels",
        CO,
        "empirical loss: 1/n dropped",
    ),
    Mutation(
        "co-G-S",
        "flows/cooccurrence/flow.py",
        '"G": S * z + m1 * (M_V @ z),',
        '"G": m1 * (M_V @ z),',
        CO,
        "dG/dt: S z term dropped",
    ),
    Mutation(
        "co-G-m1",
        "flows/cooccurrence/flow.py",
        '"G": S * z + m1 * (M_V @ z),',
        '"G": S * z + (M_V @ z),',
        CO,
        "dG/dt: m1 dropped from the M_V term",
    ),
    Mutation(
        "co-S-2m1",
        "flows/cooccurrence/flow.py",
        '"S": 2.0 * m1 * (G @ z),',
        '"S": m1 * (G @ z),',
        CO,
        "dS/dt: 2 m1 -> m1",
    ),
    Mutation(
        "co-MV-sym",
        "flows/cooccurrence/flow.py",
        '"M_V": Gz + Gz.T,',
        '"M_V": 2.0 * Gz,',
        CO,
        "dM_V/dt: G z^T + z G^T -> 2 G z^T",
    ),
    Mutation(
        "co-MK-sqrtm",
        "flows/cooccurrence/flow.py",
        '"M_K": (AB + AB.T) / sqrt_m,',
        '"M_K": (AB + AB.T),',
        CO,
        "dM_K/dt: 1/sqrt(m) dropped",
    ),
    Mutation(
        "co-MQ-transpose", "flows/cooccurrence/flow.py", "AtB = A.T @ B", "AtB = A @ B.T", CO, "dM_Q/dt: A^T B -> A B^T"
    ),
    Mutation(
        "co-A-order",
        "flows/cooccurrence/flow.py",
        '"A": (M_K @ B + B @ M_Q) / sqrt_m,',
        '"A": (M_K @ B + M_Q @ B) / sqrt_m,',
        CO,
        "dA/dt: B M_Q -> M_Q B",
    ),
    Mutation(
        "co-B-centre",
        "flows/cooccurrence/flow.py",
        "r = p * (Gx[:, :, None] - mean_G[:, None, :])",
        "r = p * Gx[:, :, None]",
        CO,
        "B: softmax Jacobian centring Gx^T p_l dropped",
    ),
    Mutation(
        "co-attn-sqrtm",
        "flows/cooccurrence/observables.py",
        "s = A[tokens[:, :, None], tokens[:, None, :]] / sqrt_m",
        "s = A[tokens[:, :, None], tokens[:, None, :]]",
        CO,
        "attention logits: 1/sqrt(m) dropped",
    ),
    Mutation(
        "co-gram-S",
        "flows/cooccurrence/observables.py",
        '"S": u @ u,',
        '"S": 2.0 * (u @ u),',
        CO,
        "initial Grams: S = |u|^2 doubled",
    ),
    Mutation(
        "co-gd-clock",
        "flows/cooccurrence/network.py",
        "clock=training.clock_rate(lr),\n        momentum=beta,",
        "clock=1.0,\n        momentum=beta,",
        ("tests/test_vocabulary.py",),
        "time convention: GD clock t = lr step -> step",
    ),
    Mutation(
        "co-3token-weights",
        "flows/cooccurrence/reduced.py",
        "weights = jnp.asarray([0.5, 1 / 6, 1 / 6, 1 / 6], y.dtype)",
        "weights = jnp.asarray([0.25, 0.25, 0.25, 0.25], y.dtype)",
        CO_RED,
        "phase-2 loss: group weights (1/2, 1/6, 1/6, 1/6) -> uniform",
    ),
    # --- mean field -------------------------------------------------------------------------------------------
    Mutation(
        "mf-layer-scale",
        "flows/mean_field/model.py",
        "return 1.0 / (M * L), 1.0 / (Mm * L)",
        "return 1.0 / M, 1.0 / (Mm * L)",
        MF,
        "attention layer scale 1/(M L) -> 1/M",
    ),
    Mutation(
        "mf-huber-half",
        "flows/mean_field/model.py",
        "0.5 * pos * pos / threshold",
        "pos * pos / threshold",
        MF,
        "huberized ReLU: z^2/(2 h0) -> z^2/h0",
    ),
    Mutation(
        "mf-decay-half",
        "flows/mean_field/model.py",
        "return 0.5 * lam * group_weighted(particles, layer_scales(particles))",
        "return lam * group_weighted(particles, layer_scales(particles))",
        MF,
        "weight decay: lam/2 -> lam",
    ),
    Mutation(
        "mf-risk-half",
        "flows/mean_field/model.py",
        "return 0.5 * jnp.mean(err * err)",
        "return jnp.mean(err * err)",
        MF,
        "risk: (yhat - y)^2 / 2 -> (yhat - y)^2",
    ),
    Mutation(
        "mf-velocity-scale",
        "flows/mean_field/gradients.py",
        'scale = {"V": M * L, "W": M * L, "W1": Mm * L, "W2": Mm * L}',
        'scale = {"V": M * L, "W": M, "W1": Mm * L, "W2": Mm * L}',
        MF,
        "velocity: -M L dQ/dW -> -M dQ/dW",
    ),
    Mutation(
        "mf-decay-sign",
        "flows/mean_field/gradients.py",
        "return {k: -g - lam * probes[k] for k",
        "return {k: -g + lam * probes[k] for k",
        MF,
        "adjoint velocity: weight decay sign flipped",
    ),
    Mutation(
        "mf-rev-dW",
        "flows/mean_field/model.py",
        "dW = (pairs_t @ G).T.reshape(M, D, D)",
        "dW = (pairs_t @ G).T.reshape(M, D, D).transpose(0, 2, 1)",
        MF,
        "hand-written attention VJP: dW transposed",
    ),
    Mutation(
        "mf-softmax-axis",
        "flows/mean_field/model.py",
        "S = jax.nn.softmax((pairs @ W.reshape(M, D * D).T).reshape(n, K, K, M), axis=2)",
        "S = jax.nn.softmax((pairs @ W.reshape(M, D * D).T).reshape(n, K, K, M), axis=1)",
        MF,
        "attention: softmax over queries instead of keys",
    ),
    Mutation(
        "mf-gd-lr",
        "flows/mean_field/network.py",
        'return {"attention": config.M * config.L, "mlp": config.M_mlp * config.L}',
        'return {"attention": config.M, "mlp": config.M_mlp * config.L}',
        MF,
        "GD learning rate eta_tau M L -> eta_tau M (GD no longer Euler of the flow)",
    ),
    Mutation(
        "mf-gd-clock",
        "flows/mean_field/network.py",
        "params=final, clock=clock,",
        "params=final, clock=1.0,",
        MF,
        "time convention: GD clock tau = k eta_tau -> k",
    ),
    Mutation(
        "mf-vjp-dV",
        "flows/mean_field/model.py",
        "dV = (dVZ.T @ ZT).reshape(M, D, D)",
        "dV = (dVZ.T @ ZT).reshape(M, D, D).transpose(0, 2, 1)",
        MF,
        "hand-written attention VJP: dV transposed",
    ),
    Mutation(
        "mf-vjp-dZ-keys",
        "flows/mean_field/model.py",
        'jnp.einsum("nikde,nei->ndk", dZZ, Z)\n        + jnp.einsum("nikde,ndk->nei", dZZ, Z)',
        '2.0 * jnp.einsum("nikde,nei->ndk", dZZ, Z)',
        MF,
        "hand-written attention VJP: dZ through the logits takes the query term twice, the key term never",
    ),
    Mutation(
        "mf-group-scales",
        "flows/mean_field/model.py",
        "return scales[0] * att + scales[1] * mlp",
        "return scales[1] * att + scales[0] * mlp",
        MF,
        "weight decay and dissipation: attention and MLP weights 1/(M L), 1/(M_mlp L) swapped",
    ),
    Mutation(
        "mf-mlp-grad",
        "flows/mean_field/gradients.py",
        "* huberized_relu_grad(pre, threshold)",
        "* huberized_relu(pre, threshold)",
        MF,
        "closed-form W1 gradient: sigma in place of sigma'",
    ),
    Mutation(
        "mf-adjoint-mean",
        "flows/mean_field/gradients.py",
        "err = (Z_final[:, d, -1] - y) / Z0.shape[0]",
        "err = Z_final[:, d, -1] - y",
        MF,
        "adjoint P_2L: the 1/n of the mean risk dropped",
    ),
    Mutation(
        "mf-init-radius",
        "flows/mean_field/initial.py",
        "_draw_particles(key, tuple(shapes[name] for name in GROUPS), dtype, a)",
        "_draw_particles(key, tuple(shapes[name] for name in GROUPS), dtype, 2 * a)",
        MF,
        "iid initial law: uniform on [-2a, 2a] instead of [-a, a]",
    ),
    Mutation(
        "mf-curves-reversed",
        "flows/mean_field/initial.py",
        "curve = (1.0 - w) * A[None] + w * B[None]",
        "curve = w * A[None] + (1.0 - w) * B[None]",
        MF,
        "smooth initial law: the curves run from the second draw to the tied one (coupling lost)",
    ),
    Mutation(
        "mf-speeds-mlp",
        "flows/mean_field/observables.py",
        "return jnp.concatenate([att, mlp])",
        "return att",
        ("tests/mean_field/test_observables.py", "tests/mean_field/test_reference_widths.py"),
        "particle speeds: the MLP particles left out",
    ),
    Mutation(
        "mf-first-variation-layer",
        "flows/mean_field/observables.py",
        'out["attention"] = jax.vmap(g_att)(Z_att, P_att)',
        'out["attention"] = jax.vmap(g_att)(Z_mlp, P_att)',
        MF,
        "first variation at attention probes: the MLP input Z_{2l+1} in place of Z_{2l}",
    ),
    Mutation(
        "mf-heavy-clock",
        "flows/mean_field/network.py",
        "clock=clock, momentum=beta,",
        "clock=clock, momentum=0.0,",
        ("tests/mean_field/test_train.py",),
        "heavy-ball clock: tau = lr k / (1 - beta) -> lr k",
    ),
    # --- mean-field reference, data law, Sinkhorn, rates example ---
    Mutation(
        "ref-drift-widths",
        "flows/mean_field/reference.py",
        'return attention_update(Z, p["V"], p["W"]) / M + mlp_update(Z, p["W1"], p["W2"], threshold) / Mm',
        'return attention_update(Z, p["V"], p["W"]) / Mm + mlp_update(Z, p["W1"], p["W2"], threshold) / M',
        ("tests/mean_field/test_reference_widths.py",),
        "reference drift: attention and MLP widths swapped",
    ),
    Mutation(
        "ref-integral-widths",
        "flows/mean_field/reference.py",
        'return group_weighted(values, (1.0 / nodes["V"].shape[1], 1.0 / nodes["W1"].shape[1]),',
        'return group_weighted(values, (1.0 / nodes["W1"].shape[1], 1.0 / nodes["V"].shape[1]),',
        ("tests/mean_field/test_reference_widths.py",),
        "reference decay and dissipation integrals: attention and MLP widths swapped",
    ),
    Mutation(
        "ref-interp-cross",
        "flows/mean_field/reference.py",
        "jnp.sum(a * a) + jnp.sum(a * b) + jnp.sum(b * b)",
        "jnp.sum(a * a) + jnp.sum(b * b)",
        ("tests/mean_field/test_reference_widths.py",),
        "int |interpolant|^2: cross term a.b dropped from Delta (|a|^2 + a.b + |b|^2) / 3",
    ),
    Mutation(
        "ref-decay-half",
        "flows/mean_field/reference.py",
        "return 0.5 * lam * _weighted_integral(nodes, nodes)",
        "return lam * _weighted_integral(nodes, nodes)",
        ("tests/mean_field/test_reference_widths.py",),
        "reference weight decay: lam/2 -> lam",
    ),
    Mutation(
        "ref-segment-delta",
        "flows/mean_field/reference.py",
        "return delta * _drift(Z, p, threshold)",
        "return _drift(Z, p, threshold)",
        ("tests/mean_field/test_reference_widths.py",),
        "depth ODE per node interval: dZ/du loses its Delta = 1/(K - 1)",
    ),
    Mutation(
        "ref-interp-reversed",
        "flows/mean_field/reference.py",
        "p = {k: (1.0 - u) * a[k] + u * b[k] for k in GROUPS}",
        "p = {k: u * a[k] + (1.0 - u) * b[k] for k in GROUPS}",
        ("tests/mean_field/test_reference_widths.py",),
        "depth ODE: the curves interpolated backwards within a node interval",
    ),
    Mutation(
        "ref-max-speed-mean",
        "flows/mean_field/reference.py",
        "jnp.max(obs.particle_speeds(",
        "jnp.mean(obs.particle_speeds(",
        ("tests/mean_field/test_reference_widths.py",),
        "reference max_speed: the mean speed over nodes and particles instead of the max",
    ),
    Mutation(
        "ref-test-rmse-data",
        "flows/mean_field/reference.py",
        '"test_rmse": functools.partial(_obs_rmse, suffix="_test"),',
        '"test_rmse": functools.partial(_obs_rmse, suffix=""),',
        ("tests/mean_field/test_reference_widths.py",),
        "reference test_rmse computed on the training prompts",
    ),
    Mutation(
        "ref-rmse-sqrt",
        "flows/mean_field/reference.py",
        "return jnp.sqrt(jnp.mean(err * err))",
        "return jnp.mean(err * err)",
        ("tests/mean_field/test_reference_widths.py",),
        "reference train/test RMSE: the square root dropped (MSE)",
    ),
    Mutation(
        "ref-flow-test-data",
        "flows/mean_field/reference.py",
        '_velocity_jit(\n        nodes, args["Z0"], args["y"],',
        '_velocity_jit(\n        nodes, args["Z0_test"], args["y_test"],',
        ("tests/mean_field/test_reference_widths.py",),
        "reference flow in tau trained on the test prompts",
    ),
    Mutation(
        "ref-velocity-decay-sign",
        "flows/mean_field/reference.py",
        "return {k: -g - lam * nodes[k] for k, g in zip(",
        "return {k: -g + lam * nodes[k] for k, g in zip(",
        ("tests/mean_field/test_reference_widths.py",),
        "reference velocity: weight-decay sign flipped",
    ),
    Mutation(
        "data-noise-offset",
        "flows/mean_field/data.py",
        "(n, N + 1), dtype, -1.0, 1.0)",
        "(n, N + 1), dtype, 0.0, 1.0)",
        ("tests/mean_field/test_data_law.py",),
        "label noise uniform on [0, eps] instead of [-eps, eps] (mean eps/2)",
    ),
    Mutation(
        "data-noise-scale",
        "flows/mean_field/data.py",
        "labels = labels + noise * _flat(",
        "labels = labels + 0.5 * noise * _flat(",
        ("tests/mean_field/test_data_law.py",),
        "label noise half-width eps/2 instead of eps (variance eps^2/12)",
    ),
    Mutation(
        "data-noise-law",
        "flows/mean_field/data.py",
        "noise * _flat(jax.random.uniform, k_e, (n, N + 1), dtype, -1.0, 1.0)",
        "noise * _flat(jax.random.normal, k_e, (n, N + 1), dtype) / 3.0 ** 0.5",
        ("tests/mean_field/test_data_law.py",),
        "label noise Gaussian with the uniform law's mean and variance (unbounded support)",
    ),
    Mutation(
        "data-noise-shared",
        "flows/mean_field/data.py",
        "(n, N + 1), dtype, -1.0, 1.0)",
        "(n, 1), dtype, -1.0, 1.0)",
        ("tests/mean_field/test_data_law.py",),
        "label noise: one draw shared by every column of a prompt",
    ),
    Mutation(
        "data-target-noiseless",
        "flows/mean_field/data.py",
        "return Z0, labels[:, N]",
        'return Z0, jnp.einsum("nkd,nd->nk", x, beta)[:, N]',
        ("tests/mean_field/test_data_law.py",),
        "the target y loses its label noise (context labels keep it)",
    ),
    Mutation(
        "data-sphere-law",
        "flows/mean_field/data.py",
        "g = _flat(jax.random.normal, key, shape, dtype)",
        "g = _flat(jax.random.uniform, key, shape, dtype, -1.0, 1.0)",
        ("tests/mean_field/test_data_law.py",),
        "x and beta: normalised uniform-cube draws (unit norm, not uniform on the sphere)",
    ),
    Mutation(
        "data-beta-unnormalised",
        "flows/mean_field/data.py",
        "beta = _sphere(k_b, (n, d), dtype)",
        "beta = _flat(jax.random.normal, k_b, (n, d), dtype)",
        ("tests/mean_field/test_data_law.py",),
        "beta Gaussian instead of uniform on the sphere",
    ),
    Mutation(
        "sink-no-sqrt",
        "flows/mean_field/observables.py",
        "return jnp.sqrt(jnp.maximum(div, 0.0))",
        "return jnp.maximum(div, 0.0)",
        ("tests/mean_field/test_sinkhorn_pin.py",),
        "Sinkhorn W2: the divergence S_eps returned instead of its square root",
    ),
    Mutation(
        "sink-not-debiased",
        "flows/mean_field/observables.py",
        "div = sinkdiv(jnp.asarray(x), jnp.asarray(y), epsilon=epsilon)[0]",
        'div = __import__("ott.solvers.linear", fromlist=["solve"]).solve(__import__("ott.geometry.pointcloud", '
        'fromlist=["PointCloud"]).PointCloud(jnp.asarray(x), jnp.asarray(y), epsilon=epsilon)).reg_ot_cost',
        ("tests/mean_field/test_sinkhorn_pin.py",),
        "Sinkhorn W2: the entropic cost OT_eps instead of the debiased divergence",
    ),
    Mutation(
        "sink-eps",
        "flows/mean_field/observables.py",
        "div = sinkdiv(jnp.asarray(x), jnp.asarray(y), epsilon=epsilon)[0]",
        "div = sinkdiv(jnp.asarray(x), jnp.asarray(y), epsilon=2 * epsilon)[0]",
        ("tests/mean_field/test_sinkhorn_pin.py",),
        "Sinkhorn W2: regularisation 2 eps instead of eps",
    ),
    Mutation(
        "sink-group-rows",
        "flows/mean_field/observables.py",
        "            start += n\n",
        "",
        ("tests/mean_field/test_sinkhorn_pin.py",),
        "Sinkhorn W2: every group of a shared program reads the first group's rows",
    ),
    Mutation(
        "rates-richardson-none",
        "examples/mean_field_rates.py",
        "    return 2 * fine - coarse\n",
        "    return fine\n",
        ("tests/mean_field/test_rates_richardson.py",),
        "rates example: the deeper network taken as the depth limit (no extrapolation)",
    ),
    Mutation(
        "rates-richardson-order2",
        "examples/mean_field_rates.py",
        "    return 2 * fine - coarse\n",
        "    return (4 * fine - coarse) / 3\n",
        ("tests/mean_field/test_rates_richardson.py",),
        "rates example: second-order Richardson weights (4 X(2L) - X(L)) / 3 for a first-order scheme",
    ),
    Mutation(
        "rates-richardson-swapped",
        "examples/mean_field_rates.py",
        "(Q_a, y_a), (Q_b, y_b) = results[L_R], results[2 * L_R]",
        "(Q_b, y_b), (Q_a, y_a) = results[L_R], results[2 * L_R]",
        ("tests/mean_field/test_rates_richardson.py",),
        "rates example: Richardson with the depths swapped, 2 X(L) - X(2L)",
    ),
    # --- flows.solve --------------------------------------------------------------------------------------------
    Mutation(
        "solve-direction",
        "flows/_program.py",
        'directions["event"] = event.direction',
        'directions["event"] = None',
        SOLVE,
        "events: the crossing direction ignored",
    ),
    Mutation(
        "solve-nan-blowup",
        "flows/_program.py",
        'conds["blowup"] = lambda t, y, args, **kw: ~(max_abs(y) < blowup)',
        'conds["blowup"] = lambda t, y, args, **kw: max_abs(y) > 10.0 * blowup',
        SOLVE,
        "blow-up guard at 10x the threshold (and blind to NaN)",
    ),
    Mutation(
        "solve-chunk-restart",
        "flows/_chunked.py",
        'y = _select(members, raw["y_end"], y)',
        "y = _select(members, lead(y0), y)",
        ("tests/test_solve_grid.py",),
        "save grid in chunks: each chunk restarts from y0 instead of where the last one stopped",
    ),
    Mutation(
        "solve-chunk-steps",
        "flows/_chunked.py",
        "state[k] = state[k] + np.where(members, raw[k], 0)",
        "state[k] = np.where(members, raw[k], state[k])",
        ("tests/test_solve_grid.py",),
        "save grid in chunks: the step counters of the last chunk only",
    ),
    Mutation(
        "sde-sigma-squared",
        "flows/_terms.py",
        "factor = lambda t, y, a: lx.DiagonalLinearOperator(sigma)",
        "factor = lambda t, y, a: lx.DiagonalLinearOperator(sigma * sigma)",
        ("tests/test_sde.py",),
        "additive noise: diffusion sigma^2 instead of sigma",
    ),
    Mutation(
        "sde-general-columns",
        "flows/_terms.py",
        "cols = [jnp.reshape(x, (-1, m)).astype(z.dtype)",
        "cols = [jnp.reshape(jnp.swapaxes(jnp.reshape(x, (-1, m)), 0, 1), (-1, m)).astype(z.dtype)",
        ("tests/test_sde.py",),
        "general noise: the diffusion matrix's entries read in the wrong order",
    ),
    Mutation(
        "sde-nonfinite-observables",
        "flows/_program.py",
        "~(finite_saved & all_finite(y_end))",
        "~all_finite(y_end)",
        ("tests/test_sde.py",),
        "SDE status: a non-finite saved state or observable before t1 is not flagged",
    ),
    Mutation(
        "auto-stiff-sign",
        "flows/_stiffness.py",
        "pinned = (h_rho > STIFF_FRACTION * BOUND) & (dot < 0)",
        "pinned = (h_rho > STIFF_FRACTION * BOUND) & (dot > 0)",
        ("tests/test_auto_solver.py",),
        "solver auto: a step pinned along a decaying direction not counted as stiff (never switches)",
    ),
    Mutation(
        "auto-estimate-transpose",
        "flows/_stiffness.py",
        "return A.T @ np.asarray(tableau.b_error, dtype=float)",
        "return A @ np.asarray(tableau.b_error, dtype=float)",
        ("tests/test_auto_solver.py",),
        "solver auto: the stage combination of the h rho estimate with A instead of A^T",
    ),
    Mutation(
        "auto-never-back",
        "flows/_chunked.py",
        "mode = np.where(switched, 1 - mode, mode)",
        "mode = np.where(switched, 1, mode)",
        ("tests/test_auto_solver.py",),
        "solver auto: a switch back to the explicit solver ignored",
    ),
    Mutation(
        "auto-calm-without-h",
        "flows/_stiffness.py",
        "calm = jnp.where((t1 - t0) * rho < RELAX_FRACTION * BOUND, calm + 1, 0)",
        "calm = jnp.where(rho < RELAX_FRACTION * BOUND, calm + 1, 0)",
        ("tests/test_auto_solver.py",),
        "solver auto: the switch back compares the spectral radius, not h times it, with the bound",
    ),
    # --- optimiser limits ----------------------------------------------------------------------------
    Mutation(
        "om-hb-friction",
        "flows/optim_limits/ode.py",
        "return (1.0 - beta) ** 2 / lr",
        "return (1.0 - beta) / lr",
        OM_ODE,
        "heavy ball: friction (1 - beta)^2 / lr -> (1 - beta) / lr",
    ),
    Mutation(
        "om-hb-clock",
        "flows/training.py",
        "np.asarray(steps, dtype=float) / (1.0 - beta)",
        "np.asarray(steps, dtype=float)",
        ("tests/test_network_records.py",),
        "time convention: heavy-ball clock lr step / (1 - beta) -> lr step",
    ),
    # --- the training layer --------------------------------------------------------------------------------
    Mutation(
        "tr-first-bad-step",
        "flows/training.py",
        "bad = jnp.where((bad < 0) & ~finite(params), step + 1, bad)",
        "bad = jnp.where((bad < 0) & ~finite(params), step, bad)",
        ("tests/test_training.py",),
        "failed run: the first non-finite step one too early",
    ),
    Mutation(
        "tr-truncate",
        "flows/training.py",
        "else np.asarray(save) < bad",
        "else np.asarray(save) <= bad",
        ("tests/test_training.py",),
        "failed run: the record keeps the non-finite step",
    ),
    Mutation(
        "tr-batch-loss",
        "flows/training.py",
        "losses = losses.at[step].set(value)",
        "losses = losses.at[step].set(value * 0.5)",
        ("tests/test_training.py",),
        "batch loss recorded at half its value",
    ),
    Mutation(
        "tr-heavy-ball",
        "flows/training.py",
        'extra = {} if momentum is None else {"momentum": momentum}',
        "extra = {}",
        ("tests/test_training.py",),
        "optimiser factory: heavy-ball momentum dropped",
    ),
    Mutation(
        "tr-group-scale",
        "flows/training.py",
        "make(rates[g] * scale.get(g, 1.0))",
        "make(rates[g])",
        ("tests/test_training.py",),
        "optimiser factory: the per-group rate scale (M L) dropped",
    ),
    Mutation(
        "tr-group-rates",
        "flows/training.py",
        "rates = lr if isinstance(lr, dict) else dict.fromkeys(labels.values(), lr)",
        "rates = dict.fromkeys(labels.values(), clock_rate(lr))",
        ("tests/test_training.py",),
        "optimiser factory: every group at the largest rate",
    ),
    Mutation(
        "om-adam-bias",
        "flows/optim_limits/ode.py",
        "vhat = bias_corrected(vi, wv, gi * gi)",
        "vhat = bias_corrected(vi, wm, gi * gi)",
        OM_ODE,
        "Adam ODE: v corrected by the m bias weight 1 - e^{-c1 t}",
    ),
    Mutation(
        "om-adam-sqrt",
        "flows/optim_limits/ode.py",
        "jnp.sqrt(jnp.maximum(vhat, 0.0))",
        "jnp.maximum(vhat, 0.0)",
        OM_ODE,
        "Adam ODE: sqrt(vhat) -> vhat",
    ),
    Mutation(
        "om-adam-g2",
        "flows/optim_limits/ode.py",
        "_rate(c, vi) * (gi * gi - vi)",
        "_rate(c, vi) * (jnp.abs(gi) - vi)",
        OM_ODE,
        "Adam ODE: dv/dt = c2 (g^2 - v) -> c2 (|g| - v)",
    ),
    Mutation(
        "om-sign-eps",
        "flows/optim_limits/ode.py",
        "g / jnp.sqrt(g * g + eps * eps)",
        "g / jnp.sqrt(g * g + eps)",
        OM_ODE,
        "sign descent: smoothing g / sqrt(g^2 + eps^2) -> eps",
    ),
    Mutation(
        "om-sde-replacement",
        "flows/optim_limits/noise.py",
        "(n - batch_size) / (n - 1)",
        "(n - batch_size) / n",
        OM_SDE,
        "SGD SDE: finite-population factor (n - B)/(n - 1) -> (n - B)/n",
    ),
    Mutation(
        "om-sde-batch",
        "flows/optim_limits/noise.py",
        "scale = lr * c / batch_size",
        "scale = lr * c",
        OM_SDE,
        "SGD SDE: noise scale lr / B -> lr (1/B dropped)",
    ),
    Mutation(
        "om-sde-factor",
        "flows/optim_limits/noise.py",
        "dev * root.reshape",
        "dev * w.reshape",
        OM_SDE,
        "SGD SDE: covariance factor columns sqrt(w_i) (g_i - gbar) -> w_i (g_i - gbar)",
    ),
    Mutation(
        "om-contract-group-lr",
        "flows/optim_limits/problem.py",
        "return {g: value_of_lr(lr * r) for g, r in rates.items()}",
        "return {g: value_of_lr(lr) for g, r in rates.items()}",
        ("tests/test_optimizer_contract.py",),
        "optimiser-limit contract: friction and Adam rates at lr instead of each group's lr * rate",
    ),
    Mutation(
        "om-contract-adam-b2",
        "flows/optim_limits/problem.py",
        'b1, b2 = options.get("b1", 0.9), options.get("b2", 0.999)',
        'b1, b2 = options.get("b1", 0.9), options.get("b2", 0.99)',
        ("tests/test_optimizer_contract.py",),
        "optimiser-limit contract: Adam's default b2 0.999 (optax's, as train uses) -> 0.99",
    ),
    Mutation(
        "ss-limit-clocks",
        "flows/scan_snap/flow.py",
        'rates={"Y": eta_Y, "Z": eta_Z})',
        'rates={"Y": eta_Y, "Z": eta_Y})',
        ("tests/test_optimizer_contract.py",),
        "Scan and Snap optimiser limits: Z on Y's clock",
    ),
    Mutation(
        "mf-limit-scale-free",
        "flows/mean_field/flow.py",
        'scaled = optimizer in ("gd", "momentum")',
        'scaled = optimizer in ("gd", "momentum", "adam")',
        ("tests/test_optimizer_contract.py",),
        "mean-field Adam limit on the M L clocks (Adam is invariant to the gradient's scale)",
    ),
    Mutation(
        "mf-limit-sign-eps",
        "flows/mean_field/flow.py",
        "sign_eps=1e-6\n    )",
        "sign_eps=1e-3\n    )",
        ("tests/test_optimizer_contract.py",),
        "mean-field sign smoothing default 1e-6 -> 1e-3",
    ),
    Mutation(
        "om-adam-sde-noise",
        "flows/optim_limits/noise.py",
        'scale = args["c1"] * args["sigma0"] * args["noise"]',
        'scale = args["sigma0"] * args["noise"]',
        ("tests/optim_limits/test_adam_sde.py",),
        "Adam SDE: the noise of m is c1 sigma0 Sigma^(1/2) dW -> sigma0 Sigma^(1/2) dW",
    ),
    Mutation(
        "om-adam-sde-sqrt",
        "flows/optim_limits/noise.py",
        'dt(m, args["sigma0"]) * jnp.sqrt(jnp.maximum(uhat, 0.0))',
        'dt(m, args["sigma0"]) * jnp.maximum(uhat, 0.0)',
        ("tests/optim_limits/test_adam_sde.py",),
        "Adam SDE: the preconditioner sigma0 sqrt(uhat) -> sigma0 uhat",
    ),
    Mutation(
        "ss-sde-multinomial",
        "flows/scan_snap/noise.py",
        "weights.append(class_probs[n] * coef * float(np.prod(p**N)))",
        "weights.append(class_probs[n] * float(np.prod(p**N)))",
        ("tests/scan_snap/test_noise.py",),
        "Scan and Snap SDE: population weights without the multinomial coefficient",
    ),
    # --- fitting statistics, SDE solver table ---------------------------------------------------------------
    Mutation(
        "fit-t-level",
        "flows/fitting.py",
        "stats.t.ppf((1.0 + level) / 2.0, max(dof, 1))",
        "stats.t.ppf(level, max(dof, 1))",
        ("tests/test_fitting_pins.py", "tests/test_fitting.py"),
        "t interval: two-sided quantile t_{(1+level)/2} -> one-sided t_level",
    ),
    Mutation(
        "fit-cluster-dof",
        "flows/fitting.py",
        "dof, inflation = G - 1, math.sqrt(G / (G - 1))",
        "dof, inflation = G, math.sqrt(G / (G - 1))",
        ("tests/test_fitting_pins.py",),
        "cluster bootstrap t interval: G - 1 degrees of freedom -> G",
    ),
    Mutation(
        "fit-cluster-inflation",
        "flows/fitting.py",
        "dof, inflation = G - 1, math.sqrt(G / (G - 1))",
        "dof, inflation = G - 1, 1.0",
        ("tests/test_fitting_pins.py",),
        "cluster bootstrap t interval: variance inflation sqrt(G/(G-1)) dropped",
    ),
    Mutation(
        "fit-point-dof",
        "flows/fitting.py",
        "dof, inflation = max(n - p, 1), math.sqrt(n / max(n - p, 1))",
        "dof, inflation = max(n - 1, 1), math.sqrt(n / max(n - p, 1))",
        ("tests/test_fitting_pins.py",),
        "point bootstrap t interval: n - p degrees of freedom -> n - 1",
    ),
    Mutation(
        "fit-point-inflation",
        "flows/fitting.py",
        "dof, inflation = max(n - p, 1), math.sqrt(n / max(n - p, 1))",
        "dof, inflation = max(n - p, 1), math.sqrt(n / max(n - 1, 1))",
        ("tests/test_fitting_pins.py",),
        "point bootstrap t interval: inflation sqrt(n/(n-p)) -> sqrt(n/(n-1))",
    ),
    Mutation(
        "fit-sd-ddof",
        "flows/fitting.py",
        "sd = boot.std(axis=0, ddof=1)",
        "sd = boot.std(axis=0, ddof=0)",
        ("tests/test_fitting_pins.py",),
        "t interval: bootstrap sd with ddof 0",
    ),
    Mutation(
        "fit-percentile-level",
        "flows/fitting.py",
        "np.quantile(boot, [(1.0 - level) / 2.0, (1.0 + level) / 2.0], axis=0)",
        "np.quantile(boot, [1.0 - level, level], axis=0)",
        ("tests/test_fitting_pins.py",),
        "percentile interval: quantiles (1 -+ level)/2 -> 1 - level, level",
    ),
    Mutation(
        "fit-resid-dof",
        "flows/fitting.py",
        "resid @ resid / (n - p)",
        "resid @ resid / (n - 1)",
        ("tests/test_fitting_pins.py",),
        "residual scale: n - p degrees of freedom -> n - 1",
    ),
    Mutation(
        "fit-deviation-half",
        "flows/fitting.py",
        "half = 0.5 * (hi - lo)",
        "half = hi - lo",
        ("tests/test_fitting_pins.py",),
        "deviation(): in units of the full width instead of the half-width",
    ),
    Mutation(
        "fit-deviation-which",
        "flows/fitting.py",
        "value, ci = self._coef(which)",
        'value, ci = self._coef("a")',
        ("tests/test_fitting_pins.py",),
        "joint deviation(): the a interval used for b",
    ),
    Mutation(
        "fit-boot-multiplicity",
        "flows/fitting.py",
        "w = counts[:, groups]",
        "w = np.minimum(counts, 1.0)[:, groups]",
        ("tests/test_fitting_pins.py",),
        "cluster bootstrap: a seed drawn twice weighted once",
    ),
    Mutation(
        "sde-heun-midpoint",
        "flows/_terms.py",
        '"heun": (diffrax.Heun, diffrax.BrownianIncrement),',
        '"heun": (diffrax.Midpoint, diffrax.BrownianIncrement),',
        ("tests/test_sde_table.py",),
        "SDE table: heun -> diffrax.Midpoint",
    ),
    Mutation(
        "sde-sea-euler",
        "flows/_terms.py",
        '"sea": (diffrax.SEA, diffrax.SpaceTimeLevyArea),',
        '"sea": (diffrax.Euler, diffrax.SpaceTimeLevyArea),',
        ("tests/test_sde_table.py",),
        "SDE table: sea -> diffrax.Euler",
    ),
    Mutation(
        "sde-sra1-shark",
        "flows/_terms.py",
        '"sra1": (diffrax.SRA1, diffrax.SpaceTimeLevyArea),',
        '"sra1": (diffrax.ShARK, diffrax.SpaceTimeLevyArea),',
        ("tests/test_sde_table.py",),
        "SDE table: sra1 -> diffrax.ShARK",
    ),
    Mutation(
        "sde-shark-sra1",
        "flows/_terms.py",
        '"shark": (diffrax.ShARK, diffrax.SpaceTimeLevyArea),',
        '"shark": (diffrax.SRA1, diffrax.SpaceTimeLevyArea),',
        ("tests/test_sde_table.py",),
        "SDE table: shark -> diffrax.SRA1",
    ),
    Mutation(
        "sde-order-sra1",
        "flows/_terms.py",
        '"sea": 1.0, "sra1": 1.5,',
        '"sea": 1.0, "sra1": 1.0,',
        ("tests/test_sde_table.py",),
        "SDE table: SRA1's strong order 1.5 -> 1",
    ),
    Mutation(
        "cli-interrupt-orphan",
        "flows/experiments/reproduce.py",
        "_terminate(run.proc)",
        "None",
        ("tests/test_cli.py",),
        "reproduce interrupted: the running example is left running",
    ),
    Mutation(
        "cli-interrupt-code",
        "flows/experiments/reproduce.py",
        "        return 130",
        "        return 1",
        ("tests/test_cli.py",),
        "reproduce interrupted: exit code 130 -> 1",
    ),
    # --- linear attention: data and models
    Mutation(
        "la-attn-no-1/N",
        "flows/linear_attention/model.py",
        'jnp.einsum("bi,bj->bij", eq, eq)) / N  # E E^T / N',
        'jnp.einsum("bi,bj->bij", eq, eq))  # E E^T / N',
        ("tests/linear_attention/test_model.py",),
        "linear attention: the attention's 1/N dropped",
    ),
    Mutation(
        "la-query-column",
        "flows/linear_attention/model.py",
        'gram = (jnp.einsum("bni,bnj->bij", Z, Z) + jnp.einsum("bi,bj->bij", eq, eq)) / N',
        'gram = (jnp.einsum("bni,bnj->bij", Z, Z) + 0.0 * jnp.einsum("bi,bj->bij", eq, eq)) / N',
        ("tests/linear_attention/test_model.py",),
        "linear attention: the query column left out of E E^T",
    ),
    Mutation(
        "la-separate-KQ-transpose",
        "flows/linear_attention/model.py",
        'K = jnp.einsum("hir,hjr->hij", params["W_K"], params["W_Q"])',
        'K = jnp.einsum("hir,hjr->hji", params["W_K"], params["W_Q"])',
        ("tests/linear_attention/test_model.py",),
        "separate heads: W_K W_Q^T -> W_Q W_K^T",
    ),
    Mutation(
        "la-G-transpose",
        "flows/linear_attention/model.py",
        'return jnp.einsum("h,hji->ij", bl["v"], bl["A"])',
        'return jnp.einsum("h,hij->ij", bl["v"], bl["A"])',
        ("tests/linear_attention/test_model.py", "tests/linear_attention/test_population_loss.py"),
        "effective G: v A^T -> v A",
    ),
    Mutation(
        "la-wishart-no-1/N",
        "flows/linear_attention/model.py",
        "(mean + wishart / N)",
        "(mean + wishart)",
        ("tests/linear_attention/test_population_loss.py",),
        "population loss: the Wishart variance without its 1/N",
    ),
    Mutation(
        "la-wishart-transpose-term",
        "flows/linear_attention/model.py",
        'jnp.einsum("pijl,lm,pjim->p", LB, Lq, LB)',
        'jnp.einsum("pijl,lm,pijm->p", LB, Lq, LB)',
        ("tests/linear_attention/test_population_loss.py",),
        "population loss: tr(L B L B) of the Wishart variance -> tr(L B (L B)^T)",
    ),
    Mutation(
        "la-query-cross-term",
        "flows/linear_attention/model.py",
        "- w + c[None] / N",
        "- w",
        ("tests/linear_attention/test_population_loss.py",),
        "population loss: the query column's x_q x_q^T / N term left out of the mean prediction",
    ),
    Mutation(
        "la-query-square-1/N",
        "flows/linear_attention/model.py",
        "_cubic_rest(u, S, Lq) / N**2)",
        "_cubic_rest(u, S, Lq) / N)",
        ("tests/linear_attention/test_population_loss.py",),
        "population loss: the square of the query column's term over N instead of N^2",
    ),
    Mutation(
        "la-isserlis-pairing",
        "flows/linear_attention/model.py",
        '+ 2.0 * jnp.einsum("hij,jk,hk->i", S, Lq, u)',
        '+ jnp.einsum("hij,jk,hk->i", S, Lq, u)',
        ("tests/linear_attention/test_population_loss.py",),
        "population loss: one of the two Isserlis pairings of x with x^T A x dropped",
    ),
    Mutation(
        "la-isserlis-heads",
        "flows/linear_attention/model.py",
        'crossed = jnp.einsum("ki,hij,kjl,hl->", Lu, SL, SL, u)',
        'crossed = jnp.einsum("ki,kij,hjl,hl->", Lu, SL, SL, u)',
        ("tests/linear_attention/test_population_loss.py",),
        "population loss: a sixth-moment Isserlis pairing of two heads swapped",
    ),
    Mutation(
        "la-cubature-weight",
        "flows/linear_attention/model.py",
        "weights.append(1.0 / (d + 2.0) ** 2)",
        "weights.append(1.0 / (d + 1.0) ** 2)",
        ("tests/linear_attention/test_population_loss.py",),
        "population loss: a wrong weight of the degree-5 cubature over the task",
    ),
    Mutation(
        "la-zfb-init-norm",
        "flows/linear_attention/model.py",
        "sigma * tt / np.linalg.norm(tt)",
        "sigma * tt / np.linalg.norm(theta)",
        ("tests/linear_attention/test_model.py",),
        "ZFB initialisation: ||Theta||_F = 1 instead of ||Theta Theta^T||_F = 1",
    ),
    Mutation(
        "la-data-covariance",
        "flows/linear_attention/data.py",
        "X = jax.random.normal(kx, (batch, N, d), root.dtype) @ root",
        "X = jax.random.normal(kx, (batch, N, d), root.dtype) @ root @ root",
        ("tests/linear_attention/test_data.py",),
        "data: context inputs ~ N(0, Lambda^2) instead of N(0, Lambda)",
    ),
    Mutation(
        "la-gamma-trace",
        "flows/linear_attention/observables.py",
        "gamma = (1.0 + 1.0 / config.N) * eig + eig.sum() / config.N",
        "gamma = (1.0 + 1.0 / config.N) * eig",
        ("tests/linear_attention/test_observables.py",),
        "observables: Gamma without tr(Lambda) / N (alignment measured against least squares)",
    ),
    Mutation(
        "la-train-half",
        "flows/linear_attention/network.py",
        'return model.moment_loss(params, lam, lam, jnp.eye(lam.shape[0], dtype=lam.dtype), data["N"])',
        'return 2.0 * model.moment_loss(params, lam, lam, jnp.eye(lam.shape[0], dtype=lam.dtype), data["N"])',
        ("tests/linear_attention/test_network.py",),
        "training: the population loss without ZFB's 1/2 (time off by 2)",
    ),
    Mutation(
        "la-online-frozen",
        "flows/linear_attention/network.py",
        "        key, sub = jax.random.split(key)\n        return key, draw(",
        "        _, sub = jax.random.split(key)\n        return key, draw(",
        ("tests/linear_attention/test_network.py",),
        "online SGD: the same prompts at every step",
    ),
    # --- mean field: charted model and grid PDE ---------------------------------------------------------------
    Mutation(
        "mfp-chart-transpose",
        "flows/mean_field/chart.py",
        '"attention": jnp.einsum("lmvij,avij->lma", heads, att),',
        '"attention": jnp.einsum("lmvij,avji->lma", heads, att),',
        ("tests/mean_field/test_chart.py",),
        "charted velocity: the chart's transpose applied with every matrix transposed",
    ),
    Mutation(
        "mfp-weights-ignored",
        "flows/mean_field/model.py",
        '"V": particles["V"] * att[:, :, None, None],',
        '"V": particles["V"],',
        ("tests/mean_field/test_chart.py",),
        "weighted atoms: the attention weights dropped from the forward pass",
    ),
    Mutation(
        "mfp-decay-unweighted",
        "flows/mean_field/model.py",
        "m[k].reshape(m[k].shape + (1,) * (particles[k].ndim - 2)) * (particles[k] * particles[k])",
        "(particles[k] * particles[k])",
        ("tests/mean_field/test_chart.py",),
        "weighted atoms: the weight decay without the atoms' weights",
    ),
    Mutation(
        "mfp-probe-decay-sign",
        "flows/mean_field/gradients.py",
        "return {k: -g - lam * probes[k] for k",
        "return {k: -g + lam * probes[k] for k",
        ("tests/mean_field/test_grid.py",),
        "probe velocity: the weight-decay drift with the wrong sign",
    ),
    Mutation(
        "mfp-flux-downwind",
        "flows/mean_field/grid.py",
        "G = (jnp.maximum(u, 0.0) * lo + jnp.minimum(u, 0.0) * hi) / h",
        "G = (jnp.maximum(u, 0.0) * hi + jnp.minimum(u, 0.0) * lo) / h",
        ("tests/mean_field/test_pde.py",),
        "grid flux: downwind states instead of upwind",
    ),
    Mutation(
        "mfp-flux-sign",
        "flows/mean_field/grid.py",
        "dm = dm - (_sl(G, 1, None, axis) - _sl(G, 0, -1, axis))",
        "dm = dm + (_sl(G, 1, None, axis) - _sl(G, 0, -1, axis))",
        ("tests/mean_field/test_grid.py",),
        "grid: the divergence of the flux with the wrong sign",
    ),
    Mutation(
        "mfp-diffusion-factor",
        "flows/mean_field/grid.py",
        "G = G - T * (_sl(mp, 1, None, axis) - _sl(mp, 0, -1, axis)) / (h * h)",
        "G = G - T * (_sl(mp, 1, None, axis) - _sl(mp, 0, -1, axis)) / (2.0 * h * h)",
        ("tests/mean_field/test_pde.py",),
        "grid diffusion: T Laplacian -> T/2 Laplacian",
    ),
    Mutation(
        "mfp-face-offset",
        "flows/mean_field/grid.py",
        "axes = [self.edges(k) if k == axis else self.mids(k) for k in range(self.dim)]",
        "axes = [self.edges(k) + 0.25 * self.widths[k] if k == axis else self.mids(k) for k in range(self.dim)]",
        ("tests/mean_field/test_pde.py",),
        "grid: face velocities a quarter cell off the faces",
    ),
    Mutation(
        "mfp-van-leer",
        "flows/mean_field/grid.py",
        "return jnp.where(ab > 0, 2.0 * ab / jnp.where(ab > 0, a + b, 1.0), 0.0)",
        "return jnp.where(ab > 0, ab / jnp.where(ab > 0, a + b, 1.0), 0.0)",
        ("tests/mean_field/test_pde.py",),
        "MUSCL: the van Leer slope halved (first order again)",
    ),
    Mutation(
        "mfp-escaped-sign",
        "flows/mean_field/grid.py",
        "leave = jnp.squeeze(_sl(G, -1, None, axis), axis) - jnp.squeeze(_sl(G, 0, 1, axis), axis)",
        "leave = jnp.squeeze(_sl(G, -1, None, axis), axis) + jnp.squeeze(_sl(G, 0, 1, axis), axis)",
        ("tests/mean_field/test_grid.py",),
        "grid: the mass leaving through the lower faces counted with the wrong sign",
    ),
    Mutation(
        "mfp-atom-weights",
        "flows/mean_field/grid.py",
        "weights[g] = state[g].reshape(L, -1) * c.shape[0]",
        "weights[g] = state[g].reshape(L, -1)",
        ("tests/mean_field/test_grid.py",),
        "grid law: cell masses used as relative weights without the number of cells",
    ),
    Mutation(
        "mfp-dissipation-depth",
        "flows/mean_field/grid.py",
        "diss = diss + jnp.sum(m * jnp.sum(u[g] ** 2, axis=-1)) / L",
        "diss = diss + jnp.sum(m * jnp.sum(u[g] ** 2, axis=-1))",
        ("tests/mean_field/test_grid.py",),
        "grid dissipation: the depth average's 1/L dropped",
    ),
    Mutation(
        "mfp-ou-variance",
        "flows/mean_field/grid_laws.py",
        "(np.asarray(var0, float) - stationary) * decay**2",
        "(np.asarray(var0, float) - stationary) * decay",
        ("tests/mean_field/test_pde.py",),
        "OU closed form: the variance relaxing at rate lam instead of 2 lam",
    ),
    # --- linear attention: theory and flows
    Mutation(
        "la-theory-gamma-1+1/N",
        "flows/linear_attention/theory.py",
        "return (1.0 + 1.0 / n) * lam + lam.sum() / n",
        "return lam + lam.sum() / n",
        ("tests/linear_attention/test_theory.py",),
        "theory: gamma_i without the (1 + 1/N) factor",
    ),
    Mutation(
        "la-theory-gamma-trace",
        "flows/linear_attention/theory.py",
        "return (1.0 + 1.0 / n) * lam + lam.sum() / n",
        "return (1.0 + 1.0 / n) * lam + lam.sum() / n**2",
        ("tests/linear_attention/test_theory.py",),
        "theory: gamma_i with tr(Lambda)/N^2 instead of tr(Lambda)/N",
    ),
    Mutation(
        "la-wishart-second-moment",
        "flows/linear_attention/theory.py",
        "second = (1.0 + 1.0 / n) * lam @ A @ lam",
        "second = lam @ A @ lam",
        ("tests/linear_attention/test_theory.py",),
        "theory: E[L_hat A L_hat] without the Lambda A^T Lambda / N term",
    ),
    Mutation(
        "la-loss-cross-term",
        "flows/linear_attention/theory.py",
        "- 2.0 * jnp.trace(lam_q @ G @ lam @ A)",
        "- 1.0 * jnp.trace(lam_q @ G @ lam @ A)",
        ("tests/linear_attention/test_theory.py",),
        "theory: the loss's cross term -2 tr(Lambda G Lambda) halved",
    ),
    Mutation(
        "la-plateau-order",
        "flows/linear_attention/theory.py",
        'order = np.argsort(-lam, kind="stable")\n    gains',
        'order = np.argsort(lam, kind="stable")\n    gains',
        ("tests/linear_attention/test_theory.py",),
        "theory: PCR plateaus adding the smallest eigen-directions first",
    ),
    Mutation(
        "la-escape-log-sign",
        "flows/linear_attention/theory.py",
        "- 2.0 * jnp.log1p(-x)) / 6.0",
        "+ 2.0 * jnp.log1p(-x)) / 6.0",
        ("tests/linear_attention/test_theory.py",),
        "theory: the separate heads' exact escape time with the wrong sign of ln(1 - x)",
    ),
    Mutation(
        "la-merged-rate",
        "flows/linear_attention/theory.py",
        "    s = lam**2 * np.sqrt(d)\n",
        "    s = lam**2 * d\n",
        ("tests/linear_attention/test_theory.py",),
        "theory: the merged mode's singular value lambda^2 d instead of lambda^2 sqrt(d)",
    ),
    Mutation(
        "la-fixed-point-exponent",
        "flows/linear_attention/theory.py",
        "return gamma_values(eigenvalues, N) ** (-1.0 / 3.0)",
        "return gamma_values(eigenvalues, N) ** (-1.0 / 2.0)",
        ("tests/linear_attention/test_theory.py",),
        "theory: the separate heads' fixed point gamma^{-1/2} instead of gamma^{-1/3}",
    ),
    Mutation(
        "la-derived-gamma",
        "derivations/linear_attention.py",
        "Gam = (1 + 1 / N) * Lam + (trace / N) * sp.eye(d)",
        "Gam = Lam + (trace / N) * sp.eye(d)",
        ("tests/derivations/test_generated.py", "tests/linear_attention/test_derivation.py"),
        "derivation: Gamma without (1 + 1/N) in the symbolic loss (the generated flow goes stale)",
    ),
    Mutation(
        "la-derived-ansatz",
        "derivations/linear_attention.py",
        "self.ansatz = {v: s, k: s, q: s}",
        "self.ansatz = {v: s, k: s, q: 2 * s}",
        ("tests/linear_attention/test_derivation.py",),
        "derivation: an unbalanced ansatz for the separate heads' scalar ODE",
    ),
    Mutation(
        "la-reduced-KQ-transpose",
        "flows/linear_attention/flow.py",
        "W_KQ = jnp.zeros((d + 1, d + 1)).at[:d, :d].set(R @ y[1:].reshape(d, d) @ R.T)",
        "W_KQ = jnp.zeros((d + 1, d + 1)).at[:d, :d].set(R @ y[1:].reshape(d, d).T @ R.T)",
        ("tests/linear_attention/test_flow.py",),
        "reduced ZFB flow: the state's U mapped onto W^{KQ}_11 transposed (G = u U instead of u U^T)",
    ),
    Mutation(
        "la-reduced-rotation",
        "flows/linear_attention/flow.py",
        'U = R.T @ np.asarray(params["W_KQ"][: config.d, : config.d]) @ R',
        'U = R @ np.asarray(params["W_KQ"][: config.d, : config.d]) @ R.T',
        ("tests/linear_attention/test_flow.py",),
        "reduced ZFB flow: the key-query block rotated into the eigenbasis the wrong way",
    ),
    Mutation(
        "la-reduced-N",
        "flows/linear_attention/flow.py",
        '"N": float(config.N)}',
        '"N": float(config.N + 1)}',
        ("tests/linear_attention/test_flow.py",),
        "reduced ZFB flow: the generated field given N + 1",
    ),
)


def _copy_repo(dest: Path) -> None:
    """Copy the tracked and untracked (not ignored) files of the repository into `dest`."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


def _pytest(copy: Path, tests, timeout: float, workers: str = "0"):
    """(returncode, seconds, first failing test id) of the default-suite run of `tests` in `copy`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(PYTHONPATH=str(copy), MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-n", workers, "-p", "no:cacheprovider", *tests],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - start, "timeout"
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, flags=re.M)
    return proc.returncode, time.perf_counter() - start, (failed[0] if failed else proc.stdout[-300:])


def _check_list(mutations) -> None:
    ids = [m.id for m in mutations]
    if len(set(ids)) != len(ids):
        raise ValueError("mutation ids must be unique")
    for m in mutations:
        text = (ROOT / m.path).read_text()
        count = text.count(m.old)
        if count != 1:
            raise ValueError(
                f"mutation {m.id}: its text occurs {count} times in {m.path} (must be once); update the list"
            )
        for t in m.tests:
            if not (ROOT / t).is_file():
                raise ValueError(f"mutation {m.id}: test file {t} does not exist")


def _check_one(copy: Path, m: Mutation, timeout: float) -> dict:
    path = copy / m.path
    original = path.read_text()
    path.write_text(original.replace(m.old, m.new))
    try:
        code, secs, first = _pytest(copy, m.tests, timeout)
    finally:
        path.write_text(original)
    killed = code is None or code != 0
    return dict(id=m.id, path=m.path, what=m.what, killed=killed, seconds=round(secs, 1), by=first if killed else None)


def _scratch_copy(root: Path) -> Path:
    _copy_repo(root)
    probe = subprocess.run(
        [sys.executable, "-c", "import flows; print(flows.__file__)"],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    if not probe.stdout.strip().startswith(str(root)):
        raise RuntimeError(f"the scratch copy does not import its own flows package: {probe.stdout}{probe.stderr}")
    return root


def run(mutations=MUTATIONS, *, jobs: int = 1, timeout: float = 900.0, baseline: bool = True, log=print) -> list[dict]:
    """Apply each mutation in a scratch copy, run its tests (`jobs` mutations at a time, each in its own
    copy), return one row per mutation in the order of `mutations`."""
    from concurrent.futures import ThreadPoolExecutor
    from queue import Queue

    _check_list(mutations)
    with tempfile.TemporaryDirectory(prefix="flows-mutations-") as tmp:
        copies = Queue()
        for i in range(max(1, jobs)):
            copies.put(_scratch_copy(Path(tmp) / f"repo{i}"))
        if baseline:  # skip only when the default suite has just passed on this tree
            files = sorted({t for m in mutations for t in m.tests})
            copy = copies.get()
            code, secs, first = _pytest(copy, files, 3 * timeout, workers="auto")
            copies.put(copy)
            if code != 0:
                raise RuntimeError(f"the unmutated tests do not pass ({first}); fix them before checking mutations")
            log(f"baseline: {len(files)} test files pass unmutated ({secs:.0f} s)")

        def one(m):
            copy = copies.get()
            try:
                row = _check_one(copy, m, timeout)
            finally:
                copies.put(copy)
            log(
                f"{'killed  ' if row['killed'] else 'SURVIVED'} {m.id:22s} {row['seconds']:6.1f} s  {m.what}"
                + (f"  [{row['by']}]" if row["killed"] else "")
            )
            return row

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return list(pool.map(one, mutations))


def table(rows) -> str:
    """The Markdown table of a run (for the closing note and docs)."""
    lines = ["| mutation | file | mistake | result | caught by |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| `{r['id']}` | `{r['path']}` | {r['what']} | {'killed' if r['killed'] else '**survived**'} "
            f"| {('`' + str(r['by']).split('::')[-1][:60] + '`') if r['killed'] else ''} |"
        )
    killed = sum(r["killed"] for r in rows)
    lines.append(f"\n{killed}/{len(rows)} mutations killed.")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="check only these mutations")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--jobs", type=int, default=1, help="mutations checked at a time (one scratch copy each)")
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the unmutated run of the listed tests (only right after the suite passed)",
    )
    args = parser.parse_args(argv)
    chosen = MUTATIONS
    if args.only:
        unknown = set(args.only) - {m.id for m in MUTATIONS}
        if unknown:
            parser.error(f"unknown mutation id(s): {', '.join(sorted(unknown))}")
        chosen = tuple(m for m in MUTATIONS if m.id in args.only)
    if args.list:
        for m in chosen:
            print(f"{m.id:22s} {m.path:36s} {m.what}")
        return 0
    rows = run(chosen, jobs=args.jobs, baseline=not args.no_baseline)
    print()
    print(table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["killed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
