"""Sequence classes: sizes, token numbering, validation, samplers (Tian et al. 2023, Sec. 3.2, Sec. 8)."""

import jax
import numpy as np
import pytest

from flows.scan_snap import SequenceClasses, sample_counts, sample_tokens, syn_medium, syn_small, zipfian

# the samplers jitted (batch size and T static), as training runs them: one program each per shape, where the
# eager calls compiled ~20 small programs (~8 s on two busy cores)
counts_jit = jax.jit(sample_counts, static_argnums=(2, 3))
tokens_jit = jax.jit(sample_tokens, static_argnums=(2, 3))


def test_syn_small_layout():
    c = syn_small()
    assert (c.num_classes, c.vocab_size) == (2, 34)
    assert c.query == (30, 31) and c.next_token == (32, 33)
    assert np.flatnonzero(c.common_mask).tolist() == list(range(10))
    assert np.flatnonzero(c.distinct_mask[0]).tolist() == list(range(10, 20))
    assert np.flatnonzero(c.distinct_mask[1]).tolist() == list(range(20, 30))
    np.testing.assert_allclose(c.cond_probs[0, :10], 1 / 15.5, rtol=1e-14)
    np.testing.assert_allclose(c.cond_probs[0, 10:20], np.linspace(0.1, 1, 10) / 15.5, rtol=1e-14)


@pytest.mark.parametrize("L", [1, 3, 5, 10])
def test_syn_medium_sizes(L):
    c = syn_medium(L)
    assert c.num_classes == 2 * L and c.vocab_size == 10 + 23 * L
    assert len(c.query_tokens) == L
    assert c.distinct_mask.sum(axis=1).tolist() == [10] * (2 * L)
    assert c.common_mask.sum() == 10


def test_validation_names_field():
    with pytest.raises(ValueError, match="cond_probs"):
        SequenceClasses(np.array([[0.5, 0.6]]), (0,), (1,))
    with pytest.raises(ValueError, match="next_token"):
        SequenceClasses(np.full((2, 3), 1 / 3), (0, 0), (1, 1))
    with pytest.raises(ValueError, match="class_probs"):
        SequenceClasses(np.full((2, 3), 1 / 3), (0, 0), (1, 2), class_probs=(0.2, 0.2))
    with pytest.raises(ValueError, match="num_queries"):
        syn_medium(0)


def test_zipfian_and_overlap():
    z = zipfian(num_queries=2, num_distinct=5, num_common=3, exponent=1.2)
    p = z.cond_probs[0, 3:8]
    assert np.all(np.diff(p) > 0)
    w = np.array([[1.0, 1.0, 1.0, 0.0, 0, 0], [0.0, 1.0, 1.0, 1.0, 0, 0]])  # overlapping supports
    o = SequenceClasses.from_weights(w, (4, 4), (4, 5))
    assert o.common_mask.tolist() == [False, True, True, False, False, False]


def test_counts_equal_token_histograms():
    a = syn_medium(3).arrays()
    cls, N = counts_jit(a, jax.random.PRNGKey(3), 16, 40)
    cls2, tok = tokens_jit(a, jax.random.PRNGKey(3), 16, 40)
    assert np.array_equal(np.asarray(cls), np.asarray(cls2))
    H = np.zeros_like(np.asarray(N))
    tok = np.asarray(tok)
    for b in range(16):
        np.add.at(H[b], tok[b], 1.0)
    assert np.array_equal(H, np.asarray(N))
    assert np.all(np.asarray(N).sum(axis=1) == 39)
    support = np.asarray(a.cond)[np.asarray(cls)] > 0
    assert np.all(np.asarray(N)[~support] == 0)


def test_counts_have_multinomial_mean():
    a = syn_small().arrays()
    cls, N = counts_jit(a, jax.random.PRNGKey(0), 4000, 64)
    cls, N = np.asarray(cls), np.asarray(N)
    for n in range(2):
        freq = N[cls == n].mean(axis=0) / 63
        np.testing.assert_allclose(freq, np.asarray(a.cond)[n], atol=0.004)


def test_classes_drawn_with_their_probabilities():
    """Each sequence's class n is drawn with probability P(n) (the inverse cdf of one uniform): 20000 draws of
    P = (0.15, 0.05, 0.8) within 0.01 (over 3.5 standard errors) of it, every class drawn."""
    from flows.scan_snap.data import SequenceClasses

    c = SequenceClasses(np.full((3, 4), 0.25), (0, 0, 1), (1, 2, 3), class_probs=(0.15, 0.05, 0.8))
    cls, _ = counts_jit(c.arrays(), jax.random.PRNGKey(0), 20000, 8)
    np.testing.assert_allclose(np.bincount(np.asarray(cls), minlength=3) / 20000, [0.15, 0.05, 0.8], atol=0.01)


def test_support_counts_by_comparison_sums_equal_the_scatter(T=40):  # 39 tokens: a short last slice
    """`sample_support_counts(scatter=False)` (the sweep's counting: comparison sums over slices of tokens)
    draws the same counts as the scatter-add, padded entries 0, to the last count; also with a uniform exactly
    on a cdf boundary (a token at the boundary belongs to the entry above it, as `sample_tokens` places it)."""
    from flows.scan_snap.data import sample_support_counts

    a = syn_medium(3).arrays()
    both = jax.jit(lambda key: [sample_support_counts(a, key, 16, T, scatter=s) for s in (True, False)])  # one program
    for seed in range(3):
        (c1, n1), (c2, n2) = both(jax.random.PRNGKey(seed))
        assert np.array_equal(np.asarray(c1), np.asarray(c2)) and np.array_equal(np.asarray(n1), np.asarray(n2))
        assert np.all(np.asarray(n2).sum(axis=1) == T - 1) and np.asarray(n2).dtype == np.asarray(n1).dtype
    cdf = np.asarray(a.support_cdf)
    u = np.array([[cdf[0, 2], cdf[0, 2] - 1e-12, 0.0]])  # on, just below a boundary, and 0
    from flows.scan_snap import data as data_mod

    real = data_mod._draw
    try:
        data_mod._draw = lambda arrays, key, b, t: (np.zeros(1, np.int32), u)
        got = [np.asarray(sample_support_counts(a, None, 1, 4, scatter=s)[1])[0] for s in (True, False)]
    finally:
        data_mod._draw = real
    want = np.zeros(cdf.shape[1])
    want[[3, 2, 0]] = 1.0
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(got[1], want)


def test_within_bound_fails_nan_inf_and_entries_past_the_bound():
    """`model.within_bound`: False for a NaN, an inf or an entry past `blowup_bound` in any leaf, True at the
    bound, jitted and vmapped (the sweep's check) as eagerly."""
    import jax.numpy as jnp

    from flows.scan_snap.model import blowup_bound, within_bound

    bound = blowup_bound(jnp.float64)
    ok = {"Y": jnp.full((3, 3), -bound), "Z": jnp.zeros((2, 3))}
    assert bool(within_bound(ok))
    for bad in (jnp.nan, jnp.inf, -jnp.inf, np.nextafter(bound, np.inf)):
        tree = {"Y": ok["Y"].at[1, 2].set(bad), "Z": ok["Z"]}
        assert not bool(within_bound(tree)) and not bool(jax.jit(within_bound)(tree))
        tree = {"Y": ok["Y"], "Z": ok["Z"].at[0, 0].set(bad)}
        assert not bool(within_bound(tree))
    batch = {"Y": jnp.stack([ok["Y"], ok["Y"].at[0, 0].set(jnp.nan)]), "Z": jnp.stack([ok["Z"]] * 2)}
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(within_bound))(batch)), [True, False])


@pytest.mark.parametrize("batched", [False, True, "training"])
def test_within_bound_and_max_abs_see_a_nan_in_a_large_leaf(batched):
    """A NaN in a leaf large enough for XLA to hand its reduction to YNNPACK (whose max drops NaN entries) fails
    `within_bound` under the compile options of a single program, a sweep's and a training sweep's, vmapped
    (one reduction over every run, then per run) as alone, and `_program.max_abs` (the solver's blow-up event)
    is NaN there."""
    import jax.numpy as jnp

    from flows import _xla
    from flows._program import max_abs
    from flows.scan_snap.model import within_bound

    runs = jnp.zeros((64, 40, 40))
    for bad in (jnp.nan, jnp.inf):
        Y = runs.at[37, 5, 7].set(bad)
        per_run = _xla.jit(jax.vmap(lambda y: within_bound({"Y": y})), batched=batched)(Y)
        np.testing.assert_array_equal(np.asarray(per_run), np.arange(64) != 37)
        assert not bool(_xla.jit(lambda y: within_bound({"Y": y}), batched=batched)(Y))
        assert not np.isfinite(float(_xla.jit(max_abs, batched=batched)({"Y": Y, "b": jnp.ones(3)})))
    assert bool(np.all(np.asarray(_xla.jit(jax.vmap(lambda y: within_bound({"Y": y})), batched=batched)(runs))))
    assert float(_xla.jit(max_abs, batched=batched)({"Y": runs.at[3, 1, 1].set(-2.5)})) == 2.5
