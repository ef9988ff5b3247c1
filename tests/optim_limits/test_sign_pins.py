"""The smoothed sign of the sign-descent limit against literal values (an independent pin: the sign-descent
tests compare the flow with the discrete update built from the same `sign_eps`, so they cannot see a wrong
smoothing)."""

import jax
import jax.numpy as jnp
import numpy as np

from flows.optim_limits import ode


def test_sign_eps_literal_values():
    g = jnp.array([3.0, -3.0, 1e-3, 0.0, 5.0])
    # sqrt form: g / sqrt(g^2 + eps^2): a 3-4-5 triangle, the sign of g, 0 at 0, 1/sqrt(2) at g = eps
    literal = [0.6, -0.6, 1e-3 / np.sqrt(16.000001), 0.0, 5.0 / np.sqrt(41.0)]
    np.testing.assert_allclose(ode.sign_eps(g, 4.0), literal, rtol=1e-12)
    np.testing.assert_allclose(ode.sign_eps(jnp.array(2.0), 2.0), 1 / np.sqrt(2.0), rtol=1e-12)
    # adam form: g / (|g| + eps)
    np.testing.assert_allclose(
        ode.sign_eps(g, 1.0, form="adam"), [0.75, -0.75, 1e-3 / 1.001, 0.0, 5.0 / 6.0], rtol=1e-12
    )
    # eps -> 0: the sign
    np.testing.assert_allclose(ode.sign_eps(g[:2], 1e-9), [1.0, -1.0], rtol=1e-12)


def test_sign_descent_field_is_minus_sign_eps_of_the_gradient():
    # L = sum_i a_i theta_i^2 / 2: grad = a theta; the field is -g / sqrt(g^2 + eps^2) componentwise
    a = jnp.array([1.0, 4.0, 0.5])
    limit = ode.sign_descent(lambda th, batch: 0.5 * jnp.sum(batch * th**2))
    theta = jnp.array([3.0, -1.0, 0.0])
    f = limit.vector_field(0.0, limit.initial_state(theta), limit.make_args(a, eps=4.0))
    g = np.asarray(a * theta)
    np.testing.assert_allclose(np.asarray(jax.tree_util.tree_leaves(f)[0]), -g / np.sqrt(g**2 + 16.0), rtol=1e-12)
