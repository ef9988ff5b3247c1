"""T -> inf flows: full flow vs jax.grad, reduced flow vs full flow with slaved Y, pair invariant, chi
sandwich, generated class-symmetric reduction (Tian et al. 2023, Secs. 3.2, 5, 6)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows.scan_snap import observables as obs
from flows.scan_snap import solve_flow, syn_medium, syn_small, theory, zipfian
from flows.scan_snap.flow import (
    UNROLLED_K,
    flow_args,
    full_vector_field,
    gram_inverse,
    population_loss,
    reduced_vector_field,
    slaved_decoder,
)


# right-hand sides and references jitted: one program per vocabulary size (eager, every op of the vector
# field and of its gradient compiled on its own, ~10 s a case on two busy cores)
@jax.jit
def _rhs_and_grad(y, args):
    return full_vector_field(0.0, y, args), jax.grad(population_loss)(y, args)


@jax.jit
def _slaved_full_and_reduced(Z, h, args):
    Ys = slaved_decoder(Z, h, args)
    full = full_vector_field(0.0, {"Y": Ys, "Z": Z}, args)["Z"]
    red = reduced_vector_field(0.0, {"Z": Z, "h": h, "B": jnp.zeros(args["E"].shape[0])}, args)["Z"]
    return full, red


@pytest.mark.parametrize(
    "classes", [syn_small(), syn_medium(3), zipfian(num_queries=1, next_per_query=3)], ids=["small", "medium3", "zipf"]
)
def test_full_flow_is_minus_eta_grad_of_population_loss(classes):
    M = classes.vocab_size
    args = flow_args(classes, 2.5, 0.3)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        y = {"Y": rng.normal(size=(M, M)), "Z": rng.normal(size=(M, M))}
        rhs, g = jax.tree_util.tree_map(np.asarray, _rhs_and_grad(y, args))
        for name, eta in (("Y", 2.5), ("Z", 0.3)):
            err = float(np.max(np.abs(rhs[name] + eta * g[name])))
            assert err <= 1e-12 * max(1.0, float(np.max(np.abs(rhs[name])))), (name, err)
        assert np.max(np.abs(rhs["Z"])) > 1e-3  # a moving point


@pytest.mark.parametrize("classes", [syn_small(), syn_medium(3)], ids=["small", "medium3"])
def test_reduced_equals_full_with_slaved_decoder(classes):
    """Exact slaving: Y = (F^dagger)^T W(h) makes the full Z-flow equal the reduced flow."""
    M, K = classes.vocab_size, classes.num_classes
    args = flow_args(classes, 2.0, 0.7, exact_slaving=True)
    assert args["E"].shape[0] == K
    for seed, h in ((0, 0.01), (1, 0.2)):
        Z = 0.5 * np.random.default_rng(seed).normal(size=(M, M))
        full, red = (np.asarray(x) for x in _slaved_full_and_reduced(Z, np.asarray(h), args))
        assert float(np.max(np.abs(full - red))) <= 1e-10 * float(np.max(np.abs(full)))


def _pair_residual(Z, classes, n):
    q = classes.query[n]
    dts = np.flatnonzero(classes.distinct_mask[n])
    P = classes.cond_probs[n, dts]
    dz = Z[:, q, dts]
    r0 = (P / P[-1]) ** 2 - 1
    res = obs.pair_invariant_residual(dz, dz[:, -1:], r0[None, :])
    return float(np.max(np.abs(np.asarray(res))))


# the reduced solves of syn_small: one save grid and one tolerance, so that the single solves of the two tests
# below share one compiled program
REDUCED_TS = np.concatenate([[0.0], np.geomspace(0.01, 200, 40)])
REDUCED_TOL = dict(rtol=1e-11, atol=1e-13)


def test_reduced_flow_keeps_pair_invariant():
    c = syn_small()
    tr = solve_flow(c, 10.0, 1.0, REDUCED_TS, reduced=True, **REDUCED_TOL)
    Z = np.asarray(tr.ys["Z"])
    assert Z[-1, 30, 19] > 0.3  # it moved
    for n in range(2):
        assert _pair_residual(Z, c, n) <= 1e-8
    # chi sandwich (eq. 12) for the dominant DT l0 = 19 of class 0
    B = np.asarray(tr.ys["B"])[:, 0]
    chi = np.exp(2 * Z[:, 30, 19])
    f0 = np.asarray(
        obs.normalized_attention(
            obs.attention(jnp.zeros((34, 34)), jnp.asarray(c.cond_probs), jnp.asarray(np.eye(34)[[30, 31]]))
        )
    )
    lo, hi = (np.asarray(x) for x in theory.chi_bounds(B, f0[0, 19] ** 2))
    assert np.all(lo <= chi * (1 + 1e-9)) and np.all(chi <= hi * (1 + 1e-9))
    # discriminative bias: DTs up, CTs down
    assert np.all(Z[-1, 30, 10:20] > 0) and np.all(Z[-1, 30, :10] < 0)


def test_full_flow_pair_invariant_improves_with_eta_ratio():
    c = syn_small()
    ts = np.array([0.0, 30.0])
    errs = []
    for eta_Y in (1.0, 10.0):
        Z = np.asarray(solve_flow(c, eta_Y, 1.0, ts).ys["Z"])
        # normalise by the size of the moved logits
        errs.append(_pair_residual(Z, c, 0) / np.max(np.abs(np.expm1(-2 * Z[-1, 30, 10:20]))))
    assert errs[1] < errs[0], errs


def test_generated_class_symmetric_reduction_matches_vectorised():
    """The sympy class-symmetric reduction (emitted by codegen) equals the vectorised reduced flow on a
    class-symmetric instance (equal DT probabilities, one query per class, DT / CT logits shared)."""
    from flows._generated import scan_snap_reduced_symmetric as gen
    from flows.scan_snap import SequenceClasses

    w = np.zeros((3, 17))
    w[:, :2] = 1.0
    for n in range(3):
        w[n, 2 + 4 * n : 6 + 4 * n] = 0.5
    sym = SequenceClasses.from_weights(w, (14, 15, 16), (14, 15, 16))
    args = flow_args(sym, 3.0, 0.8)
    M = 17.0
    red_field, gen_field = jax.jit(reduced_vector_field), jax.jit(gen.vector_field)  # no eager op compiles
    for zd, zc, h in ((0.3, -0.2, 0.05), (1.0, -0.7, 0.4)):
        Z = np.zeros((17, 17))
        for n in range(3):
            Z[14 + n, 2 + 4 * n : 6 + 4 * n] = zd
            Z[14 + n, :2] = zc
        red = np.asarray(red_field(0.0, {"Z": Z, "h": np.asarray(h), "B": np.zeros(3)}, args)["Z"])
        gamma = (M - 1) ** 2 * h * np.exp(-M * h) / ((M - 1) * np.exp(-M * h) + 1)
        gargs = {
            "p_d": jnp.asarray(0.5 / 4),
            "p_c": jnp.asarray(1 / 4),
            "D": jnp.asarray(4.0),
            "C": jnp.asarray(2.0),
            "K": jnp.asarray(3.0),
            "eta_Z": jnp.asarray(0.8),
            "gamma": jnp.asarray(gamma),
        }
        out = np.asarray(gen_field(0.0, np.asarray([zd, zc]), gargs))
        np.testing.assert_allclose(np.asarray(out), [float(red[15, 6]), float(red[15, 0])], rtol=1e-11)
        assert float(out[0]) > 0 > float(out[1])


@pytest.mark.parametrize("strategy", ["auto", "vmap"])
def test_rate_sweep_is_one_batched_solve_equal_to_single_solves(strategy, monkeypatch):
    """eta arrays: one solve_batch call whose members equal the single solves: vmapped, the same steps (1e-12);
    in lockstep (the default, `flows._sweep`), to the tolerances: each member's error is controlled as in its
    own solve, rtol = 1e-11 on entries of size ~2 over 41 save chunks (measured 8e-11; 1e-9 bounds it)."""
    from flows import _sweep

    monkeypatch.setattr(_sweep.config, "strategy", strategy)
    c = syn_small()
    ts = REDUCED_TS
    etas = np.array([1.0, 3.0])
    batch = solve_flow(c, etas, 1.0, ts, reduced=True, **REDUCED_TOL)
    assert batch.status == ("ok", "ok") and np.shape(batch.ys["Z"]) == (2, len(ts), c.vocab_size, c.vocab_size)
    tol = 1e-12 if strategy == "vmap" else 1e-9
    for i, e in enumerate(etas):
        single = solve_flow(c, e, 1.0, ts, reduced=True, **REDUCED_TOL)
        assert np.max(np.abs(np.asarray(batch.ys["Z"][i]) - np.asarray(single.ys["Z"]))) <= tol
        assert np.max(np.abs(np.asarray(batch.observables["gamma"][i]) - single.observables["gamma"])) <= tol
        if strategy == "vmap":
            assert int(batch.num_steps[i]) == int(single.num_steps)
    with pytest.raises(ValueError, match="eta_Y"):
        solve_flow(c, np.ones((2, 2)), 1.0, ts)
    with pytest.raises(ValueError, match="one length"):
        solve_flow(c, [1.0, 2.0], [1.0, 2.0, 3.0], ts)


@pytest.mark.parametrize("K", [1, 2, 3, UNROLLED_K, UNROLLED_K + 1])
def test_gram_inverse_is_the_inverse_of_attention_gram_matrices(K):
    """The reduced flow's (F^T F)^{-1}: the unrolled elimination (K <= UNROLLED_K) and the LAPACK fallback
    agree with numpy's inverse on Gram matrices of random unit attention vectors, one at a time and vmapped
    over a batch (as a sweep runs it), and G G^{-1} is the identity."""
    rng = np.random.default_rng(K)
    F = np.abs(rng.normal(size=(5, K, 3 * K + 4)))
    F /= np.linalg.norm(F, axis=-1, keepdims=True)
    G = F @ np.swapaxes(F, -1, -2)
    exact = np.linalg.inv(G)
    batched = np.asarray(jax.jit(jax.vmap(gram_inverse))(jnp.asarray(G)))
    np.testing.assert_allclose(batched, exact, rtol=1e-10, atol=1e-12 * np.max(np.abs(exact)))
    np.testing.assert_allclose(np.asarray(gram_inverse(jnp.asarray(G[0]))), exact[0], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(G @ batched, np.broadcast_to(np.eye(K), G.shape), atol=1e-10)
