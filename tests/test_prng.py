"""flows._prng: the unrolled threefry2x32 draws what JAX's threefry2x32 draws, bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows import _prng, _xla


def test_fused_rewraps_inside_a_trace_only():
    """Eagerly the key comes back unchanged (JAX's threefry is one dispatch; the unrolled hash would run one
    operation at a time); under jit it is rewrapped, and draws the same bits."""
    assert _xla.Config().fused_prng is True
    k = jax.random.PRNGKey(4)
    assert _prng.fused(k) is k
    impls = []

    @jax.jit
    def draw(key):
        f = _prng.fused(key)
        impls.append(str(jax.random.key_impl(f)))
        return jax.random.uniform(f, (7, 5))

    assert _same(draw(k), jax.random.uniform(k, (7, 5)))
    assert impls == [str(_prng.THREEFRY_FUSED)], impls


def _same(a, b):
    return np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("seed", [0, 7, 2**32 - 1])
def test_fused_key_draws_the_same_bits(seed):
    k = jax.random.PRNGKey(seed)
    f = _prng.rewrap(k)
    assert str(jax.random.key_impl(f)) != "threefry2x32"  # really rewrapped
    assert _same(jax.random.key_data(jax.random.split(f, 5)), jax.random.split(k, 5))
    assert _same(jax.random.key_data(jax.random.split(f, (2, 3))), jax.random.split(k, (2, 3)))
    assert _same(jax.random.key_data(jax.random.fold_in(f, 3)), jax.random.fold_in(k, 3))
    for dtype in (jnp.uint8, jnp.uint16, jnp.uint32, jnp.uint64):
        assert _same(jax.random.bits(f, (4, 3), dtype), jax.random.bits(k, (4, 3), dtype)), dtype
    for dtype in (jnp.float32, jnp.float64):
        assert _same(jax.random.uniform(f, (40, 3), dtype, -0.2, 0.2), jax.random.uniform(k, (40, 3), dtype, -0.2, 0.2))
        assert _same(jax.random.normal(f, (41,), dtype), jax.random.normal(k, (41,), dtype))
    assert _same(jax.random.uniform(f, ()), jax.random.uniform(k, ()))
    logits = jnp.log(jnp.arange(1.0, 6.0))
    assert _same(jax.random.categorical(f, logits, shape=(300,)), jax.random.categorical(k, logits, shape=(300,)))


def test_fused_under_jit_and_vmap_and_typed_keys():
    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(6, dtype=jnp.uint32))
    fast = jax.jit(jax.vmap(lambda k: jax.random.uniform(_prng.fused(k), (16, 9))))(keys)
    assert _same(fast, jax.vmap(lambda k: jax.random.uniform(k, (16, 9)))(keys))
    typed = jax.random.key(3)
    assert _same(jax.random.normal(_prng.rewrap(typed), (8,)), jax.random.normal(typed, (8,)))
    assert _prng.rewrap(_prng.rewrap(typed)).dtype == _prng.rewrap(typed).dtype  # idempotent
    other = jax.random.key(3, impl="rbg")
    assert _prng.rewrap(other) is other  # other implementations pass through


def test_threefry2x32_known_answer():
    """The Random123 known-answer vector for Threefry-2x32-20 (key = counter = 0), as jax.random's own test."""
    x = _prng.threefry2x32(np.uint32(0), np.uint32(0), jnp.zeros(1, jnp.uint32), jnp.zeros(1, jnp.uint32))
    assert [int(x[0][0]), int(x[1][0])] == [0x6B200159, 0x99BA4EFE]


def test_fused_switched_off_by_config(monkeypatch):
    """`flows._xla.config.fused_prng = False` (the benchmark's off switch) leaves every key as it is, traced
    too."""
    monkeypatch.setattr(_xla.config, "fused_prng", False)
    impls = []

    @jax.jit
    def impl_of(key):
        impls.append(str(jax.random.key_impl(_prng.fused(key))))
        return key

    impl_of(jax.random.key(5))
    assert impls == ["threefry2x32"], impls
