"""The wiring check of the optimiser limits, shared by the systems' test_optim.py (co-occurrence, mean field):
one program that evaluates, at the initial parameters, the Adam field against the first optax Adam update,
the sign field against the smoothed sign update, and two semi-implicit Euler steps of the momentum field
against two optax heavy-ball steps."""

import jax
import optax

from flows import optim_limits as ol


def wiring_gaps(grad, adam, opt, sign, eps_sign, momentum, heavy, h):
    """A jitted `params -> dict`: `field` (the Adam limit's field on theta at t = 0) and `updates` (the first
    `opt` update), `sign_gap` (sign field + sign_eps(g), eps `eps_sign`), `heavy_gap` (theta after two
    `heavy` steps minus two semi-implicit Euler steps of size `h` of the momentum field: v first, then theta
    with the new v) and `moved` (how far the two heavy steps went). `adam`, `sign`, `momentum` are
    (limit, args) pairs; `grad(params, batch)` is the gradient of the loss they share."""
    tmap = jax.tree_util.tree_map
    (limit, args), (sign_limit, sargs), (mom, margs) = adam, sign, momentum

    @jax.jit
    def gaps(p):
        field = limit.vector_field(0.0, limit.initial_state(p), args)["theta"]
        with jax.numpy_dtype_promotion("standard"):
            updates, _ = opt.update(grad(p, args["batch"]), opt.init(p), p)
        sign_gap = tmap(
            lambda f, g: f + ol.sign_eps(g, eps_sign), sign_limit.vector_field(0.0, p, sargs), grad(p, sargs["batch"])
        )
        theta, state, y = p, heavy.init(p), mom.initial_state(p)
        for _ in range(2):
            step, state = heavy.update(grad(theta, margs["batch"]), state, theta)
            theta = optax.apply_updates(theta, step)
            v = tmap(lambda a, b: a + h * b, y["v"], mom.vector_field(0.0, y, margs)["v"])
            y = {
                "theta": tmap(
                    lambda a, b: a + h * b,
                    y["theta"],
                    mom.vector_field(0.0, {"theta": y["theta"], "v": v}, margs)["theta"],
                ),
                "v": v,
            }
        return {
            "field": field,
            "updates": updates,
            "sign_gap": sign_gap,
            "heavy_gap": tmap(lambda a, b: a - b, theta, y["theta"]),
            "moved": tmap(lambda a, b: a - b, theta, p),
        }

    return gaps
