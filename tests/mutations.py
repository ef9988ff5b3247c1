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
OM_RUNS = ("tests/optim_limits/test_failed_runs.py",)
MF = ("tests/mean_field/test_network.py", "tests/mean_field/test_flow.py", "tests/mean_field/test_observables.py")
JM_DATA = ("tests/joma/test_data.py",)
JM_MODEL = ("tests/joma/test_model.py",)
JM_THEORY = ("tests/joma/test_theory.py",)
JM_FLOW = ("tests/joma/test_flow.py",)
JM_V = ("tests/joma/test_v_flow.py",)
JM_DERIV = ("tests/joma/test_derivation.py",)
JM_SPEC = ("tests/joma/test_spec.py",)

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "sweep-norm-all-members",
        "flows/_sweep.py",
        "return jnp.sqrt(jnp.max(squares) / width)",
        "return jnp.sqrt(jnp.sum(squares) / (size * width))",
        ("tests/test_sweep.py",),
        "lockstep sweep: the RMS error over all members instead of each member's own (the largest)",
    ),
    Mutation(
        "sweep-chunk-padding-from-next",
        "flows/_sweep.py",
        "out.append((np.minimum(index, size - 1), int(min(length, size - i * length))))",
        "out.append((np.minimum(index + 1, size - 1), int(min(length, size - i * length))))",
        ("tests/test_sweep.py",),
        "lockstep chunks: each chunk's members shifted by one (a member solved in the wrong chunk's place)",
    ),
    Mutation(
        "sweep-chunk-statuses-reversed",
        "flows/_sweep.py",
        "status=sum((tuple(p.status) for p in parts), ()),",
        "status=sum((tuple(p.status) for p in reversed(parts)), ()),",
        ("tests/test_sweep.py",),
        "lockstep chunks: the chunks' statuses joined in the wrong order (a member reports another's status)",
    ),
    Mutation(
        "support-counts-boundary",
        "flows/scan_snap/data.py",
        "return below + jnp.sum(u_i[:, :, None] < cdf[:, None, :], axis=1, dtype=jnp.int32)",
        "return below + jnp.sum(u_i[:, :, None] <= cdf[:, None, :], axis=1, dtype=jnp.int32)",
        ("tests/scan_snap/test_data.py",),
        "the sweep's token counts: a uniform on a cdf boundary counted in the entry below it",
    ),
    Mutation(
        "class-draw-shifted-cdf",
        "flows/scan_snap/data.py",
        "cdf = jnp.cumsum(arrays.class_probs)[:-1]",
        "cdf = jnp.cumsum(arrays.class_probs)[1:]",
        ("tests/scan_snap/test_data.py",),
        "the class draw: the inverse cdf read one class off (P(n + 1) for class n)",
    ),
    Mutation(
        "bound-by-max",
        "flows/scan_snap/model.py",
        "return jnp.all(jnp.stack([jnp.all(jnp.abs(v) <= blowup_bound(v.dtype)) for v in leaves]))",
        "return jnp.all(jnp.stack([jnp.max(jnp.abs(v)) <= blowup_bound(v.dtype) for v in leaves]))",
        ("tests/scan_snap/test_data.py",),
        "within_bound by max |v| (YNNPACK's max drops NaN entries of a large leaf)",
    ),
    Mutation(
        "bound-per-run-any",
        "flows/scan_snap/model.py",
        "per_leaf = [jnp.all((jnp.abs(v) <= blowup_bound(v.dtype)).reshape(runs, -1), axis=1) for v in leaves]",
        "per_leaf = [jnp.any((jnp.abs(v) <= blowup_bound(v.dtype)).reshape(runs, -1), axis=1) for v in leaves]",
        ("tests/scan_snap/test_data.py",),
        "within_bound under vmap: a run passes when any of its entries is within the bound",
    ),
    Mutation(
        "sweep-trained-z-rows-dropped",
        "flows/scan_snap/network.py",
        'return final["Y"], Z0.at[:, np.asarray(query), :].set(final["Z"]), losses, bad',
        'return final["Y"], Z0, losses, bad',
        ("tests/scan_snap/test_network.py",),
        "train_sweep: the full Z is the start's (the trained query rows not put back)",
    ),
    Mutation(
        "sweeps-thread-precision-dropped",
        "flows/scan_snap/network.py",
        "with jax.enable_x64(x64):",
        "with jax.enable_x64(bool(jax.config.read('jax_enable_x64'))):",
        ("tests/scan_snap/test_network.py",),
        "train_sweeps: the preparing thread at JAX's global precision, not the caller's",
    ),
    Mutation(
        "sweep-shared-batch-of-the-first-seed",
        "flows/scan_snap/network.py",
        "return row, (cls[row], counts[row])",
        "return row, (cls[0], counts[0])",
        ("tests/scan_snap/test_network.py",),
        "train_sweep: every run trained on the batches of the first distinct seed",
    ),
    Mutation(
        "sweep-shared-keys-in-run-order",
        "flows/scan_snap/network.py",
        'data = {**data, "batch_keys": np.asarray(keys)[distinct]}',
        'data = {**data, "batch_keys": np.asarray(keys)[: distinct.size]}',
        ("tests/scan_snap/test_network.py",),
        "train_sweep: the table of batch keys taken in run order, not in the order of the distinct seeds",
    ),
    Mutation(
        "retain-scratch-block-past-the-max",
        "flows/_xla.py",
        "_SCRATCH_BLOCK = 32 * 2**20 - 2 * 4096",
        "_SCRATCH_BLOCK = 32 * 2**20 + 4096",
        ("tests/test_xla_options.py",),
        "retain_scratch frees a block past glibc's largest dynamic threshold: the thresholds stay where they were",
    ),
    Mutation(
        "support-z-of-class-zero",
        "flows/scan_snap/model.py",
        'zs = params["Z"][arrays.query_row[:, None], arrays.support_index][cls]',
        'zs = params["Z"][arrays.query_row[:, None], arrays.support_index][jnp.zeros_like(cls)]',
        ("tests/scan_snap/test_network.py",),
        "support_loss: every sequence reads the attention logits of class 0's query row and support",
    ),
    Mutation(
        "support-weights-reverse-projection-dropped",
        "flows/scan_snap/model.py",
        "return None, f * (g - jnp.sum(g * f, axis=-1, keepdims=True) * f)",
        "return None, f * g",
        ("tests/scan_snap/test_network.py",),
        "the reverse rule of f = w / ||w||: the projection off f dropped",
    ),
    Mutation(
        "sweeps-job-order-swapped",
        "flows/scan_snap/network.py",
        "pending = pool.submit(prepare, j + 1)",
        "pending = pool.submit(prepare, len(jobs) - 1 - (j + 1))",
        ("tests/scan_snap/test_network.py",),
        "train_sweeps: the jobs after the first prepared in reverse order",
    ),
    Mutation(
        "support-place-reverse-at-other-token",
        "flows/scan_snap/model.py",
        "return jnp.take_along_axis(g, idx, axis=1), None, None",
        "return jnp.take_along_axis(g, jnp.flip(idx, axis=1), axis=1), None, None",
        ("tests/scan_snap/test_network.py",),
        "the placement's reverse rule gathers each entry's gradient at another entry's token",
    ),
    Mutation(
        "ynn-option-on-single-programs",
        "flows/_xla.py",
        "    if batched and config.ynn_reduce_only:",
        "    if config.ynn_reduce_only:",
        ("tests/test_xla_options.py",),
        "the sweep programs' YNNPACK option applied to every program (single solves compile longer)",
    ),
    Mutation(
        "batch-slots-no-power-of-two",
        "flows/_chunked.py",
        "return min(SAVE_CHUNK, max(BATCH_MIN_SLOTS, 1 << max(0, int(n_saves) - 1).bit_length()))",
        "return min(SAVE_CHUNK, max(BATCH_MIN_SLOTS, int(n_saves)))",
        ("tests/test_solve_grid.py",),
        "a batch's save slots: the grid's own length (a program per length) instead of its power of two",
    ),
    Mutation(
        "gram-inverse-unscaled-pivot",
        "flows/scan_snap/flow.py",
        "pivot_row = A[i] / A[i, i]",
        "pivot_row = A[i]",
        ("tests/scan_snap/test_flow.py",),
        "Scan and Snap reduced flow: Gauss-Jordan without dividing the pivot row by its pivot",
    ),
    Mutation(
        "fused-eager-rewrap",
        "flows/_prng.py",
        "if not config.fused_prng or not jax.config.jax_threefry_partitionable or not _under_a_jit():",
        "if not config.fused_prng or not jax.config.jax_threefry_partitionable:",
        ("tests/test_prng.py",),
        "fused PRNG: eager keys rewrapped too (an eager draw then runs the unrolled hash op by op)",
    ),
    Mutation(
        "sweep-stack-order",
        "flows/_sweep.py",
        "parts = [ys[bounds[i] : bounds[i + 1]].reshape((size,) + shapes[i]) for i in range(len(shapes))]",
        "parts = [jnp.flip(ys[bounds[i] : bounds[i + 1]].reshape((size,) + shapes[i]), 0) for i in range(len(shapes))]",
        ("tests/test_sweep.py",),
        "lockstep sweep: the stacked state unstacked in the wrong member order (members mixed)",
    ),
    Mutation(
        "ss-support-normalise",
        "flows/scan_snap/model.py",
        "return w / jnp.linalg.norm(w, axis=-1, keepdims=True)",
        "return w / jnp.sum(w, axis=-1, keepdims=True)",
        SS_NET,
        "train_sweep's support loss: f = c / ||c|| not normalised",
    ),
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
        "flows/driver.py",
        "        momentum=beta,",
        "        momentum=0.0,",
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
        "flows/scan_snap/model.py",
        'obs.cross_entropy(obs.normalized_attention(u) @ params["Y"], arrays.next_token[cls])',
        'obs.cross_entropy(u @ params["Y"], arrays.next_token[cls])',
        SS_NET,
        "count-vector loss: f = X^T b / ||X^T b|| not normalised",
    ),
    Mutation(
        "ss-blowup-bound",
        "flows/scan_snap/model.py",
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
    # the Gram rows are generated from derivations.cooccurrence (GramDerivation): a mistake in the derivation
    # leaves the committed module stale; a mistake in the module is caught by the physics tests
    Mutation(
        "co-G-S",
        "flows/_generated/cooccurrence_gram.py",
        "'G': (((m1) * (M_V @ z)) + ((S) * (z)))[:, 0],",
        "'G': (((m1) * (M_V @ z)))[:, 0],",
        CO + ("tests/derivations/test_matrix.py",),
        "dG/dt: S z term dropped",
    ),
    Mutation(
        "co-G-m1",
        "flows/_generated/cooccurrence_gram.py",
        "'G': (((m1) * (M_V @ z)) + ((S) * (z)))[:, 0],",
        "'G': (((M_V @ z)) + ((S) * (z)))[:, 0],",
        CO + ("tests/derivations/test_matrix.py",),
        "dG/dt: m1 dropped from the M_V term",
    ),
    Mutation(
        "co-S-2m1",
        "flows/_generated/cooccurrence_gram.py",
        "'S': jnp.asarray(2*m1*jnp.trace(_x0 @ z)),",
        "'S': jnp.asarray(m1*jnp.trace(_x0 @ z)),",
        CO + ("tests/derivations/test_matrix.py",),
        "dS/dt: 2 m1 -> m1",
    ),
    Mutation(
        "co-MV-sym",
        "flows/_generated/cooccurrence_gram.py",
        "'M_V': (G @ (z).T) + (z @ _x0),",
        "'M_V': 2 * (G @ (z).T),",
        CO + ("tests/derivations/test_matrix.py",),
        "dM_V/dt: G z^T + z G^T -> 2 G z^T",
    ),
    Mutation(
        "co-MK-sqrtm",
        "flows/_generated/cooccurrence_gram.py",
        "'M_K': ((_x1) * (A @ _x2)) + ((_x1) * (B @ _x3)),",
        "'M_K': ((A @ _x2)) + ((B @ _x3)),",
        CO + ("tests/derivations/test_matrix.py",),
        "dM_K/dt: 1/sqrt(m) dropped",
    ),
    Mutation(
        "co-MQ-transpose",
        "flows/_generated/cooccurrence_gram.py",
        "'M_Q': ((_x1) * (_x3 @ B)) + ((_x1) * (_x2 @ A)),",
        "'M_Q': ((_x1) * (A @ _x2)) + ((_x1) * (B @ _x3)),",
        CO + ("tests/derivations/test_matrix.py",),
        "dM_Q/dt: A^T B + B^T A -> A B^T + B A^T",
    ),
    Mutation(
        "co-A-order",
        "flows/_generated/cooccurrence_gram.py",
        "'A': ((_x1) * (B @ M_Q)) + ((_x1) * (M_K @ B)),",
        "'A': ((_x1) * (M_Q @ B)) + ((_x1) * (M_K @ B)),",
        CO + ("tests/derivations/test_matrix.py",),
        "dA/dt: B M_Q -> M_Q B",
    ),
    Mutation(
        "co-derived-a2",
        "derivations/cooccurrence.py",
        '{(a.T, a): s["m1"]},',
        "{(a.T, a): 1},",
        ("tests/derivations/test_generated.py",),
        "Gram derivation: a^T a = 1 instead of m1 (the generated Gram flow goes stale)",
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
        "flows/driver.py",
        "clock=training.clock_rate(lr),\n        momentum=beta,",
        "clock=1.0,\n        momentum=beta,",
        ("tests/cooccurrence/test_network.py",),
        "time convention: the driver's GD clock t = lr step -> step",
    ),
    Mutation(
        "co-spec-signs",
        "flows/cooccurrence/spec.py",
        '"a": init_params(config)[1],',
        '"a": -init_params(config)[1],',
        ("tests/cooccurrence/test_network.py", "tests/test_spec_equality.py"),
        "the spec's data: the output signs a not those of the initialisation",
    ),
    Mutation(
        "co-batch-stream",
        "flows/cooccurrence/spec.py",
        "jax.random.fold_in(init_key, 1) if batch_seed is None",
        "jax.random.fold_in(init_key, 2) if batch_seed is None",
        ("tests/test_spec_equality.py",),
        "seeds: the minibatch stream moved off the pre-port one",
    ),
    Mutation(
        "co-T1-direction",
        "flows/cooccurrence/flow.py",
        '"gram": Event(_gram_margin, direction=True,',
        '"gram": Event(_gram_margin, direction=False,',
        CO,
        "T1: the first downcrossing of the minimum margin instead of the upcrossing",
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
        "flows/mean_field/spec.py",
        'rate_scale={"attention": config.M * config.L, "mlp": config.M_mlp * config.L}',
        'rate_scale={"attention": config.M, "mlp": config.M_mlp * config.L}',
        MF,
        "the spec's rate scale M L -> M: GD at eta_tau M (no longer Euler of the particle flow)",
    ),
    Mutation(
        "mf-gd-clock",
        "flows/driver.py",
        "        clock=training.clock_rate(lr),",
        "        clock=1.0,",
        MF,
        "time convention: the driver's GD clock tau = k eta_tau -> k",
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
        "solve-chunk-constant-steps",
        "flows/_chunked.py",
        "stop, end = _chunk_end(grid, first, chunk, float(t1), origin, h)",
        "stop, end = _chunk_end(grid, first, chunk, float(t1), origin, None)",
        ("tests/test_solve_grid.py",),
        "save grid in chunks: constant steps restart at a chunk's last save time, off the step grid",
    ),
    Mutation(
        "solve-chunk-constant-dt",
        "flows/_chunked.py",
        "dt = np.where(length > 0, length / np.maximum(1.0, np.ceil(length / h - 1e-6)), h)",
        'dt = np.full(size, options["dt0"])',
        ("tests/joma/test_v_flow.py", "tests/test_solve_grid.py"),
        "save grid in chunks: each chunk's constant steps counted by diffrax from dt0 (a rounding adds a step)",
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
        "return jax.tree_util.tree_map(lambda r: value_of_lr(lr * r), rates)",
        "return jax.tree_util.tree_map(lambda r: value_of_lr(lr), rates)",
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
        "flows/scan_snap/spec.py",
        'rate_scale={"Y": eta_Y, "Z": eta_Z},',
        'rate_scale={"Y": eta_Y, "Z": eta_Y},',
        ("tests/scan_snap/test_spec.py", "tests/test_spec_equality.py"),
        "Scan and Snap's spec: Z trained and its optimiser limits run on Y's clock",
    ),
    Mutation(
        "ss-population-paper-time",
        "flows/scan_snap/limits.py",
        'args["eta_Z"] = args["eta_Z"] * classes.num_classes',
        'args["eta_Z"] = args["eta_Z"]',
        ("tests/test_silent_surprises.py",),
        "the population limit on the paper's time: Z at eta_Z instead of K eta_Z",
    ),
    Mutation(
        "ss-decoder-class-clock",
        "flows/scan_snap/limits.py",
        '{"eta_Y": args["eta_Y"] * args["p"], "M": M}',
        '{"eta_Y": args["eta_Y"], "M": M}',
        ("tests/scan_snap/test_spec.py",),
        "the decoder limit: h_n at eta_Y instead of eta_Y P(n) (the class's share of the batch-mean gradient)",
    ),
    Mutation(
        "ss-symmetric-rows",
        "flows/scan_snap/limits.py",
        'return y[1] * args["distinct"] + y[2] * args["common"]',
        'return y[2] * args["distinct"] + y[1] * args["common"]',
        ("tests/scan_snap/test_spec.py",),
        "the symmetric limit's Z: z_d and z_c swapped",
    ),
    Mutation(
        "drv-system-finite",
        "flows/driver.py",
        'checks = {} if system.finite is None else {"finite": system.finite}',
        "checks = {}",
        ("tests/test_driver.py", "tests/scan_snap/test_spec.py"),
        "driver: a system's own failed-run check (System.finite, Scan and Snap's blowup bound) ignored",
    ),
    Mutation(
        "mf-limit-scale-free",
        "flows/optim_limits/ode.py",
        'return _clocked(_tmap(lambda gi: -sign_eps(gi, args["eps"], form), grad(theta, args)), theta, args)',
        'return _tmap(lambda gi: -sign_eps(gi, args["eps"], form), grad(theta, args))',
        ("tests/mean_field/test_optim.py",),
        "sign descent off the groups' clocks (the mean field's M L dropped, as before the port)",
    ),
    Mutation(
        "mf-limit-sign-eps",
        "flows/mean_field/spec.py",
        "sign_eps=1e-6,",
        "sign_eps=1e-3,",
        ("tests/mean_field/test_optim.py",),
        "mean-field sign smoothing default 1e-6 -> 1e-3",
    ),
    # --- the discrete runs' failed-run rule and the limits' input checks ---------------------------------
    Mutation(
        "om-run-truncate",
        "flows/optim_limits/_checks.py",
        "keep = np.asarray(save) < step",
        "keep = np.asarray(save) <= step",
        OM_RUNS,
        "run_optax/run_sgd failed run: the record keeps the non-finite step",
    ),
    Mutation(
        "om-run-param-step",
        "flows/optim_limits/_checks.py",
        "for k, v in series.items()}, int(b))",
        "for k, v in series.items()}, -1)",
        OM_RUNS,
        "run_optax/run_sgd failed run: non-finite parameters ignored (a diverging run_optax returns NaN silently)",
    ),
    Mutation(
        "om-run-first-run",
        "flows/optim_limits/_checks.py",
        "step, run = min(failed)",
        "step, run = max(failed)",
        OM_RUNS,
        "run_sgd failed run: the last failing run (and step) reported instead of the first",
    ),
    Mutation(
        "om-make-args-keywords",
        "flows/optim_limits/_checks.py",
        "unknown = sorted(k for k in kwargs if k not in keywords)",
        "unknown = []",
        OM_RUNS,
        "make_args: another limit's keyword (c1 on gradient flow) reaches the function (a TypeError)",
    ),
    Mutation(
        "om-sgd-data-finite",
        "flows/optim_limits/noise.py",
        'check_finite_tree("data", data)',
        "None",
        OM_RUNS,
        "SGD SDE and run_sgd: NaN in the data not refused",
    ),
    Mutation(
        "in-params-real",
        "flows/_inputs.py",
        'if np.dtype(dtype).kind not in "iuf":',
        'if np.dtype(dtype).kind not in "biufc":',
        OM_RUNS,
        "parameters: complex or bool theta0 accepted (cast to float)",
    ),
    Mutation(
        "in-loss-scalar",
        "flows/_inputs.py",
        "out.shape == () and",
        "",
        OM_RUNS,
        "loss check: a loss that is not a scalar passes (a JAX TypeError from jax.grad)",
    ),
    Mutation(
        "forwarded-options-dropped",
        "flows/_checks.py",
        "return {name: options.get(name, defaults[name]) for name in names}",
        "return {name: defaults.get(name, options.get(name)) for name in names}",
        ("tests/test_solve_errors.py", "tests/test_fitting.py"),
        "a thin wrapper's **options: the given options replaced by the target's defaults",
    ),
    Mutation(
        "mf-group-rates-pytree",
        "flows/optim_limits/problem.py",
        "return jax.tree_util.tree_map(lambda r: value_of_lr(lr * r), rates)",
        "return value_of_lr(lr)",
        ("tests/test_optimizer_contract.py",),
        "momentum's friction and Adam's rates at lr instead of per group lr_g (the mean field's nested groups)",
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
        "flows/linear_attention/spec.py",
        'return model.moment_loss(params, lam, lam, jnp.eye(lam.shape[0], dtype=lam.dtype), batch["N"])',
        'return 2.0 * model.moment_loss(params, lam, lam, jnp.eye(lam.shape[0], dtype=lam.dtype), batch["N"])',
        ("tests/linear_attention/test_network.py",),
        "training: the population loss without ZFB's 1/2 (time off by 2)",
    ),
    Mutation(
        "la-online-frozen",
        "flows/driver.py",
        "        key, sub = jax.random.split(key)\n        return key, system.batch(",
        "        _, sub = jax.random.split(key)\n        return key, system.batch(",
        ("tests/linear_attention/test_network.py", "tests/linear_attention/test_pins_maps.py", "tests/test_driver.py"),
        "the driver's minibatches (online prompts, a fixed sample's rows): the same batch at every step",
    ),
    # --- the shared driver of every spec and flows.compare ---------------------------------------------------
    Mutation(
        "drv-momentum-clock",
        "flows/driver.py",
        "        momentum=beta,",
        "        momentum=0.0,",
        ("tests/test_vocabulary.py", "tests/test_driver.py"),
        "driver: heavy ball's record on the clock lr * step instead of lr * step / (1 - beta)",
    ),
    Mutation(
        "drv-rate-scale",
        "flows/driver.py",
        "training.make_optimizer(kind, lr, heavy, labels=labels, scale=scale, options=adam_options)",
        "training.make_optimizer(kind, lr, heavy, labels=labels, scale=None, options=adam_options)",
        ("tests/test_driver.py",),
        "driver: a group's rate scale dropped from the optimiser",
    ),
    Mutation(
        "drv-limit-rates",
        "flows/driver.py",
        "rates=_rates(system, params), sign_eps",
        "rates=None, sign_eps",
        ("tests/test_driver.py",),
        "driver: a group's rate scale dropped from the limits' clocks",
    ),
    Mutation(
        "cmp-momentum-steps",
        "flows/comparison.py",
        "steps = max(1, round(t_end * (1.0 - beta) / lr))",
        "steps = max(1, round(t_end / lr))",
        ("tests/test_comparison.py",),
        "compare: heavy ball trained to t_end / (1 - beta) (the momentum clock forgotten)",
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
        "Gam = (1 + 1 / N) * Lam + (sp.Trace(Lam) / N) * eye",
        "Gam = Lam + (sp.Trace(Lam) / N) * eye",
        ("tests/derivations/test_generated.py", "tests/linear_attention/test_derivation.py"),
        "derivation: Gamma without (1 + 1/N) in the symbolic loss (the generated flow goes stale)",
    ),
    Mutation(
        "la-derived-separate-gamma",
        "derivations/linear_attention.py",
        "gamma = (1 + 1 / N) * lam + trace / N",
        "gamma = lam + trace / N",
        ("tests/linear_attention/test_derivation.py",),
        "derivation: the separate heads' direction loss without the (1 + 1/N) of gamma",
    ),
    Mutation(
        "la-reduced-KQ-transpose",
        "flows/linear_attention/flow.py",
        'W_KQ = jnp.zeros((d + 1, d + 1)).at[:d, :d].set(y["U"])',
        'W_KQ = jnp.zeros((d + 1, d + 1)).at[:d, :d].set(y["U"].T)',
        ("tests/linear_attention/test_flow.py",),
        "reduced ZFB flow: the state's U mapped onto W^{KQ}_11 transposed (G = u U instead of u U^T)",
    ),
    Mutation(
        "la-reduced-rotation",
        "flows/linear_attention/flow.py",
        'return {"Lambda": 0.5 * (lam + lam.T), "N"',
        'return {"Lambda": jnp.diag(jnp.diagonal(lam)), "N"',
        ("tests/linear_attention/test_flow.py",),
        "reduced ZFB flow: the covariance given without its rotation (its diagonal only)",
    ),
    Mutation(
        "la-reduced-N",
        "flows/linear_attention/flow.py",
        '"N": jnp.asarray(float(config.N), lam.dtype)}',
        '"N": jnp.asarray(float(config.N + 1), lam.dtype)}',
        ("tests/linear_attention/test_flow.py",),
        "reduced ZFB flow: the generated field given N + 1",
    ),
    # --- trust round 4: beyond the training distribution, data and maps, the grid PDE, failed runs and solves
    Mutation(
        "la-pin-prompt-length-G",
        "flows/linear_attention/theory.py",
        "return shift_loss(optimal_G(eigenvalues, N, rotation), M, _covariance(eigenvalues, rotation), **shift)",
        "return shift_loss(optimal_G(eigenvalues, M, rotation), M, _covariance(eigenvalues, rotation), **shift)",
        ("tests/linear_attention/test_pins_shift.py",),
        "prompt-length shift: the model tested at M taken as trained at M (Gamma_M^{-1} instead of Gamma_N^{-1})",
    ),
    Mutation(
        "la-pin-covshift-side",
        "flows/linear_attention/theory.py",
        'return optimal_G(lam, N, rotation) @ np.asarray(_sym("test_cov", test_cov, lam.size))',
        'return np.asarray(_sym("test_cov", test_cov, lam.size)) @ optimal_G(lam, N, rotation)',
        ("tests/linear_attention/test_pins_shift.py",),
        "covariate shift map: Lambda' Gamma^{-1} instead of Gamma^{-1} Lambda'",
    ),
    Mutation(
        "la-pin-shift-G-transpose",
        "flows/linear_attention/theory.py",
        "jnp.trace(lam_q @ G @ second @ G.T)",
        "jnp.trace(lam_q @ G.T @ second @ G)",
        ("tests/linear_attention/test_pins_shift.py",),
        "shift loss: the query covariance on the other side of G (G^T Lambda_q G)",
    ),
    Mutation(
        "la-pin-shift-task-trace",
        "flows/linear_attention/theory.py",
        "(jnp.trace(A @ lam) / n) * lam",
        "(jnp.trace(lam) / n) * lam",
        ("tests/linear_attention/test_pins_shift.py",),
        "shift loss: tr(Lambda) / N for tr(A Lambda) / N in the Wishart moment (task shift ignored there)",
    ),
    Mutation(
        "drv-split-frozen",
        "flows/driver.py",
        "    def split(data, keys, step):\n        return keys, system.batch(keys[step], data, batch_size)",
        "    def split(data, keys, step):\n        return keys, system.batch(keys[0], data, batch_size)",
        ("tests/test_driver.py",),
        'the "split" key schedule: the same minibatch at every step (the first step\'s key)',
    ),
    Mutation(
        "la-pin-minibatch-replacement",
        "flows/system.py",
        "idx = jax.random.permutation(key, n)[:batch_size]",
        "idx = jax.random.choice(key, n, (batch_size,))",
        ("tests/linear_attention/test_pins_maps.py", "tests/test_driver.py"),
        "the default sampler (a fixed sample's minibatches): rows drawn with replacement",
    ),
    Mutation(
        "la-pin-separate-map-rows",
        "flows/linear_attention/flow.py",
        ".set((R * s[None, :]).T)",
        ".set(R * s[None, :])",
        ("tests/linear_attention/test_pins_maps.py",),
        "separate heads' map: head i on the i-th row of R instead of its i-th column",
    ),
    Mutation(
        "la-pin-separate-map-scale",
        "flows/linear_attention/flow.py",
        ".set((R * s[None, :]).T)",
        ".set((R * s[:, None]).T)",
        ("tests/linear_attention/test_pins_maps.py",),
        "separate heads' map: the scales s applied along the rows of R, not per eigen-direction",
    ),
    Mutation(
        "mfp-pin-axis-component",
        "flows/mean_field/grid.py",
        "u = u_all[g][:, start : start + count, k]",
        "u = u_all[g][:, start : start + count, 0]",
        ("tests/mean_field/test_pde_pins.py",),
        "2-D grid: every axis's faces read the velocity's first component",
    ),
    Mutation(
        "mfp-pin-axis-width",
        "flows/mean_field/grid.py",
        "axis, h = k + 1, box.widths[k]",
        "axis, h = k + 1, box.widths[0]",
        ("tests/mean_field/test_pde_pins.py",),
        "2-D grid: the first axis's cell width used on every axis",
    ),
    Mutation(
        "mfp-pin-mean-norm",
        "flows/mean_field/grid.py",
        "mean = m @ c / jnp.sum(m, axis=1, keepdims=True)",
        "mean = m @ c",
        ("tests/mean_field/test_pde_pins.py",),
        "grid law: the mean not normalised by the mass left in the box",
    ),
    Mutation(
        "mfp-pin-var-norm",
        "flows/mean_field/grid.py",
        'sq = jnp.einsum("lc,cp->lp", m, c * c) / jnp.sum(m, axis=1, keepdims=True)',
        'sq = jnp.einsum("lc,cp->lp", m, c * c) / jnp.sum(m)',
        ("tests/mean_field/test_pde_pins.py",),
        "grid law: the second moment normalised by the mass of all depth slices together",
    ),
    Mutation(
        "mfp-pin-ou-diffusion",
        "flows/mean_field/grid_laws.py",
        "var0 + 2 * temperature * tau",
        "var0 + temperature * tau",
        ("tests/mean_field/test_pde_pins.py",),
        "OU closed form at lam = 0: variance growing at T instead of 2 T",
    ),
    Mutation(
        "mfp-pin-ou-diffusion-time",
        "flows/mean_field/grid_laws.py",
        "var0 + 2 * temperature * tau",
        "var0 + 2 * temperature * tau**2",
        ("tests/mean_field/test_pde_pins.py",),
        "OU closed form at lam = 0: variance growing like tau^2",
    ),
    Mutation(
        "mfp-pin-langevin-sqrt-T",
        "flows/mean_field/chart.py",
        "sigma=math.sqrt(2.0 * temperature),",
        "sigma=math.sqrt(temperature),",
        ("tests/mean_field/test_pde_pins.py",),
        "charted Langevin particles: noise sqrt(T) instead of sqrt(2 T)",
    ),
    Mutation(
        "mfp-pin-langevin-T",
        "flows/mean_field/chart.py",
        "sigma=math.sqrt(2.0 * temperature),",
        "sigma=math.sqrt(2.0) * temperature,",
        ("tests/mean_field/test_pde_pins.py",),
        "charted Langevin particles: noise sqrt(2) T instead of sqrt(2 T)",
    ),
    Mutation(
        "tr-pin-observable-any",
        "flows/training.py",
        "ok &= np.all(np.isfinite(v.reshape(v.shape[0], -1)), axis=1)",
        "ok &= np.any(np.isfinite(v.reshape(v.shape[0], -1)), axis=1)",
        ("tests/test_training_pins.py",),
        "failed run: an array observable counted finite when any (not every) entry is",
    ),
    Mutation(
        "tr-pin-later-of-two",
        "flows/training.py",
        "return min(steps) if steps else -1",
        "return max(steps) if steps else -1",
        ("tests/test_training_pins.py",),
        "failed run: the later of the parameters' and the observables' first bad steps",
    ),
    Mutation(
        "tr-pin-last-bad-step",
        "flows/training.py",
        "bad = jnp.where((bad < 0) & ~finite(params), step + 1, bad)",
        "bad = jnp.where(~finite(params), step + 1, bad)",
        ("tests/test_training_pins.py",),
        "training loop: the last step with non-finite parameters instead of the first",
    ),
    Mutation(
        "solve-pin-last-save",
        "flows/_program.py",
        "bad = saved_ts <= t_end",
        "bad = saved_ts < t_end",
        ("tests/test_solve_nonfinite_pins.py",),
        "solve: the save at the solve's (or a chunk's) end time left out of the finite check",
    ),
    Mutation(
        "solve-pin-final-state",
        "flows/_program.py",
        "~(finite_saved & all_finite(y_end))",
        "~finite_saved",
        ("tests/test_solve_nonfinite_pins.py",),
        "solve: the final state left out of the finite check (only the saves)",
    ),
    Mutation(
        "solve-pin-sde-any",
        "flows/_program.py",
        "jnp.stack([jnp.all(jnp.isfinite(a), axis=-1) for a in packed.values()])",
        "jnp.stack([jnp.any(jnp.isfinite(a), axis=-1) for a in packed.values()])",
        ("tests/test_solve_nonfinite_pins.py",),
        "solve_sde: a saved array counted finite when any (not every) entry is",
    ),
    # --- JoMA: data, network, joint and reduced flows, the V-flow, closed forms, derivation -----------------
    Mutation(
        "jm-bump-centre",
        "flows/joma/data.py",
        "(n_distinct / n_classes)",
        "(n_classes / n_distinct)",
        JM_DATA,
        "data: the distinct tokens' bump centred at k K / n_distinct instead of k n_distinct / K",
    ),
    Mutation(
        "jm-bump-width",
        "flows/joma/data.py",
        "** 2) / bump_width)",
        "** 2) / (2 * bump_width))",
        JM_DATA,
        "data: the bump's denominator doubled",
    ),
    Mutation(
        "jm-normalise-axis",
        "flows/joma/data.py",
        "return X / jnp.sum(X, axis=0, keepdims=True)",
        "return X / jnp.sum(X, axis=1, keepdims=True)",
        JM_DATA,
        "data: the frequencies normalised per token instead of per class",
    ),
    Mutation(
        "jm-softmax-axis",
        "flows/joma/model.py",
        "return e / jnp.sum(e, axis=0, keepdims=True)",
        "return e / jnp.sum(e, axis=1, keepdims=True)",
        JM_MODEL,
        "model: softmax attention normalised over the classes instead of the tokens",
    ),
    Mutation(
        "jm-temperature",
        "flows/joma/model.py",
        "    a = z / tau\n",
        "    a = z * tau\n",
        JM_MODEL,
        "model: the logits multiplied by tau instead of divided",
    ),
    Mutation(
        "jm-residual-query",
        "flows/joma/model.py",
        "F = U[:, :M] @ B + U[:, M][:, None]",
        "F = U[:, :M] @ B",
        JM_MODEL,
        "model: the query's residual u_q dropped from f",
    ),
    Mutation(
        "jm-ce-label",
        "flows/joma/model.py",
        'return jnp.mean(jax.nn.logsumexp(out, axis=1) - jnp.sum(batch["y"] * out, axis=1))',
        "return jnp.mean(jax.nn.logsumexp(out, axis=1) - out[:, 0])",
        JM_MODEL,
        "model: every class scored against label 0",
    ),
    Mutation(
        "jm-entropy-axis",
        "flows/joma/model.py",
        "p = jnp.abs(B) / jnp.sum(jnp.abs(B), axis=0, keepdims=True)",
        "p = jnp.abs(B) / jnp.sum(jnp.abs(B), axis=1, keepdims=True)",
        JM_MODEL,
        "observables: the attention entropy normalised over the classes",
    ),
    Mutation(
        "jm-softmax-constant",
        "flows/joma/model.py",
        'return c + theory.softmax_estimate(V, params["W"], data["xbar"], data["tau"])',
        'return theory.softmax_estimate(V, params["W"], data["xbar"], data["tau"])',
        JM_MODEL,
        "observables: the softmax estimate without the start's constant C",
    ),
    Mutation(
        "jm-linear-estimate",
        "flows/joma/model.py",
        "return jnp.sqrt(jnp.maximum(c + jnp.sum(V**2, axis=1), 0.0))",
        "return jnp.sqrt(jnp.maximum(c - jnp.sum(V**2, axis=1), 0.0))",
        JM_MODEL,
        "observables: the linear estimate sqrt(c - sum v^2)",
    ),
    Mutation(
        "jm-linear-abs",
        "flows/joma/model.py",
        'z = jnp.abs(params["z"]) if attention == "linear" else params["z"]',
        'z = params["z"]',
        JM_MODEL,
        "observables: linear attention's z compared to the estimate of |z| with its sign",
    ),
    Mutation(
        "jm-exp-estimate-tau",
        "flows/joma/model.py",
        'return c + jnp.sum(V**2, axis=1) / (2 * data["tau"])',
        'return c + jnp.sum(V**2, axis=1) / data["tau"]',
        JM_MODEL,
        "observables: the exp estimate c + sum v^2 / tau",
    ),
    Mutation(
        "jm-exp-invariant-tau",
        "flows/joma/theory.py",
        "return z - jnp.sum(V**2, axis=1) / (2 * tau)",
        "return z - jnp.sum(V**2, axis=1) / tau",
        JM_THEORY + JM_FLOW,
        "theory: the exp invariant z - sum v^2 / tau",
    ),
    Mutation(
        "jm-linear-invariant",
        "flows/joma/theory.py",
        "return z**2 - jnp.sum(V**2, axis=1)",
        "return z - jnp.sum(V**2, axis=1)",
        JM_THEORY,
        "theory: the linear invariant z - sum v^2",
    ),
    Mutation(
        "jm-estimate-xbar",
        "flows/joma/theory.py",
        "return (jnp.sum(V**2, axis=1) - xbar * jnp.sum(W**2)) / (2 * tau)",
        "return (jnp.sum(V**2, axis=1) - jnp.sum(W**2)) / (2 * tau)",
        JM_THEORY,
        "theory: the softmax estimate without the mean attention b_bar",
    ),
    Mutation(
        "jm-corr-centre",
        "flows/joma/theory.py",
        "    a = a - jnp.mean(a)\n",
        "    a = a\n",
        JM_THEORY,
        "theory: the normalised correlation without centring the first vector",
    ),
    Mutation(
        "jm-blowup-half",
        "flows/joma/theory.py",
        "return math.sqrt(math.pi * T) / 2 * rest / delta",
        "return math.sqrt(math.pi * T) * rest / delta",
        JM_THEORY,
        "theory: the blow-up time sqrt(pi T) / delta (the 1/2 dropped)",
    ),
    Mutation(
        "jm-limit-square",
        "flows/joma/theory.py",
        "return float(entropy(jax.nn.softmax(jnp.asarray(mu**2 / T))))",
        "return float(entropy(jax.nn.softmax(jnp.asarray(mu / T))))",
        JM_THEORY,
        "theory: the limit entropy of softmax(mu / T)",
    ),
    Mutation(
        "jm-erfinv-rate",
        "flows/joma/theory.py",
        "+ 2 * delta * t / math.sqrt(math.pi * T)",
        "+ delta * t / math.sqrt(math.pi * T)",
        JM_THEORY,
        "theory: the linear-MLP solution at half the rate",
    ),
    Mutation(
        "jm-dz-exp-tau",
        "flows/joma/flow.py",
        "dz = jnp.sum(B * dB, axis=1) / tau",
        "dz = jnp.sum(B * dB, axis=1)",
        JM_MODEL,
        "joint flow: exp attention's z' without the 1/tau of a = z / tau",
    ),
    Mutation(
        "jm-dz-linear-x",
        "flows/joma/flow.py",
        "dz = jnp.sum(X * dB, axis=1) / tau",
        "dz = jnp.sum(B * dB, axis=1) / tau",
        JM_MODEL,
        "joint flow: linear attention's db/da = diag(b) instead of diag(x)",
    ),
    Mutation(
        "jm-dz-softmax-perp",
        "flows/joma/flow.py",
        "dz = jnp.sum(B * dB - B * jnp.sum(B * dB, axis=0, keepdims=True), axis=1) / tau",
        "dz = jnp.sum(B * dB, axis=1) / tau",
        JM_MODEL,
        "joint flow: softmax's db/da without - b b^T",
    ),
    Mutation(
        "jm-silu-prime",
        "flows/joma/flow.py",
        "return s * (1 + H * (1 - s))",
        "return s * (1 + H * s)",
        JM_MODEL,
        "joint flow: the SiLU derivative with s instead of 1 - s",
    ),
    Mutation(
        "jm-G-mean",
        "flows/joma/flow.py",
        'G = (P - batch["y"]) / n * _dphi(mlp, H)',
        'G = (P - batch["y"]) * _dphi(mlp, H)',
        JM_MODEL,
        "joint flow: the back-propagated gradient of the sum, not the mean, over classes",
    ),
    Mutation(
        "jm-dB-transpose",
        "flows/joma/flow.py",
        "dB = U[:, :M].T @ (W @ G.T)",
        "dB = U[:, :M].T @ (W @ G)",
        JM_MODEL,
        "joint flow: dL/db_k = V G[k]^T with G transposed (units and classes swapped)",
    ),
    Mutation(
        "jm-vflow-delta",
        "flows/joma/flow.py",
        'delta = args["mu"] - v if mlp == "nonlinear" else args["mu"]',
        'delta = args["mu"] - v / 2 if mlp == "nonlinear" else args["mu"]',
        JM_V,
        "V-flow: Delta = mu - v / 2",
    ),
    Mutation(
        "jm-vflow-square",
        "flows/joma/flow.py",
        'logits = v**2 / args["temperature"]',
        'logits = v / args["temperature"]',
        JM_V,
        "V-flow: the attention softmax(v / T) instead of softmax(v^2 / T)",
    ),
    Mutation(
        "jm-reduced-branch",
        "flows/joma/flow.py",
        'return args["z_sign"] * est if attention == "linear" else est',
        "return est",
        JM_FLOW,
        "reduced flow: linear attention's z = +sqrt(c + sum v^2) whatever the start's sign",
    ),
    Mutation(
        "jm-reduced-sign",
        "flows/joma/flow.py",
        'return -joint_gradients(lift(W, args, attention), args, attention, mlp)["W"]',
        'return joint_gradients(lift(W, args, attention), args, attention, mlp)["W"]',
        JM_DERIV,
        "reduced flow: gradient ascent",
    ),
    Mutation(
        "jm-derived-ansatz",
        "derivations/joma.py",
        "self.ansatz = {z[i]: c[i] + sum(W[i, j] ** 2 for j in range(CLASSES)) / (2 * tau) for i in range(TOKENS)}",
        "self.ansatz = {z[i]: c[i] + sum(W[i, j] ** 2 for j in range(CLASSES)) / tau for i in range(TOKENS)}",
        JM_DERIV,
        "derivation: the reduced flow with z = c + sum w^2 / tau substituted (the generated module goes stale)",
    ),
    Mutation(
        "jm-derived-invariant",
        "derivations/joma.py",
        'return {sp.Symbol(f"I{i + 1}"): z[i] - sq[i] / (2 * tau) for i in range(TOKENS)}',
        'return {sp.Symbol(f"I{i + 1}"): z[i] - sq[i] / tau for i in range(TOKENS)}',
        JM_DERIV,
        "derivation: the exp invariant z - sum w^2 / tau pushed forward",
    ),
    Mutation(
        "jm-derived-attention",
        "derivations/joma.py",
        "b = [X[i, k] * sp.exp(z[i] / tau) for i in range(tokens)]",
        "b = [X[i, k] * sp.exp(z[i]) for i in range(tokens)]",
        JM_DERIV,
        "derivation: exp attention without the temperature",
    ),
    # --- the symbolic engine at symbolic sizes and its reductions by symmetry ------------------------------
    Mutation(
        "mx-grad-transpose",
        "derivations/matrix.py",
        "out.append((c, _transpose_factors(rest)))",
        "out.append((c, rest))",
        ("tests/derivations/test_matrix.py",),
        "matrix calculus: d tr(.. X ..)/dX without the transpose of the rest of the product",
    ),
    Mutation(
        "sym-eigenvalue",
        "derivations/symmetry.py",
        "A = sp.Matrix.vstack(*(g - sp.eye(n) for g in gens))",
        "A = sp.Matrix.vstack(*(g + sp.eye(n) for g in gens))",
        ("tests/derivations/test_symmetry.py",),
        "reduce_by_symmetry: the eigenvalue -1 space instead of the fixed subspace",
    ),
    Mutation(
        "sym-equivariance",
        "derivations/symmetry.py",
        "moved, want = self.rates(g @ x, p), g @ self.rates(x, p)",
        "moved, want = self.rates(g @ x, p), self.rates(x, p)",
        ("tests/derivations/test_symmetry.py",),
        "symmetry check: invariance of the rates instead of equivariance",
    ),
    Mutation(
        "sym-metric",
        "derivations/symmetry.py",
        "metric = tuple((B.T * G * B)[j, j] for j in range(B.cols))",
        "metric = tuple(sp.Integer(1) for j in range(B.cols))",
        ("tests/derivations/test_symmetry.py",),
        "reduce_by_symmetry: the reduced metric without the orbit sizes",
    ),
    Mutation(
        "jm-G-batch-size",
        "flows/joma/flow.py",
        'G = (P - batch["y"]) / n * _dphi(mlp, H)',
        'G = (P - batch["y"]) / W.shape[1] * _dphi(mlp, H)',
        JM_SPEC,
        "joint flow: a minibatch's gradient divided by the number of output units, not of its classes",
    ),
    Mutation(
        "jm-spec-reseed",
        "flows/joma/spec.py",
        "    config = config.replace(seed=seed)\n",
        "    config = config\n",
        JM_SPEC,
        "spec: the driver's seed ignored (the config's own data and start at every seed)",
    ),
    Mutation(
        "jm-spec-batch-stream",
        "flows/joma/spec.py",
        '"batch": config.key("batch")',
        '"batch": config.key("init")',
        JM_SPEC,
        "spec: the minibatches drawn from the init stream",
    ),
    Mutation(
        "jm-spec-start-constant",
        "flows/joma/spec.py",
        "data=functools.partial(_data, params0),",
        "data=functools.partial(_data, None),",
        JM_SPEC,
        "spec: the invariant's constant of the config's start, not of the given params0",
    ),
    Mutation(
        "jm-spec-prediction",
        "flows/joma/spec.py",
        '"holds": bool(measured < INVARIANT_TOL),',
        '"holds": bool(measured < 1e3 * INVARIANT_TOL),',
        JM_SPEC,
        "spec: the invariant along the flow counted as held at 1e-5",
    ),
    Mutation(
        "jm-spec-branch",
        "flows/joma/spec.py",
        "        flow.check_branch(data, attention)\n",
        "",
        JM_FLOW,
        "spec: the w_flow of linear attention from a start whose z can cross 0 (c <= 0) not refused",
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
