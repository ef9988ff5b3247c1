"""Continuous-time limits of the optimisers the networks are trained with.

Every limit takes a loss `loss(theta, batch)` written in JAX (`theta` a pytree of parameters, `batch` the
data: "full batch" means the whole training set) and returns a `Limit`: a vector field `f(t, y, args)` for
`flows.solve`, `initial_state(theta0)`, `params(y)` (theta read back from a state), and `make_args(batch,
...)` (the data and the rates travel in `args`, so one compiled program serves every rate and data set of one
shape). The discrete optimisers they are held against are optax's (`run_optax`).

The limits and their clocks (g = grad L(theta), operations elementwise):

- **Gradient flow** (`gradient_flow`): dtheta/dt = -g. Clock t = lr * step (GD / `optax.sgd(lr)`).
- **Heavy-ball momentum** (`heavy_ball`): optax.sgd(lr, momentum=beta) is p <- beta p + g,
  theta <- theta - lr p. With v = (1 - beta) p and the clock s = lr * step / (1 - beta):
  dtheta/ds = -v, dv/ds = c (g - v), friction c = (1 - beta)^2 / lr, v(0) = 0 (optax's trace starts at 0).
  The optax update is exactly semi-implicit Euler of this system with step h = lr / (1 - beta) (v first,
  then theta with the new v). Fixed beta, lr -> 0: c -> inf and the flow reduces to gradient flow on the
  clock s (Kovachki & Stuart 2021, "Continuous time analysis of momentum methods", JMLR; Kunin et al. 2021,
  "Neural mechanics"); beta = 1 - sqrt(c lr) with c fixed keeps the friction finite (the damped second-order
  ODE theta'' + c theta' + c g = 0 in s) and h = sqrt(lr / c) -> 0.
- **Sign descent** (`sign_descent`): dtheta/dt = -sign_eps(g), sign_eps(g) = g / sqrt(g^2 + eps^2), a smooth
  (Lipschitz) regularisation of the discontinuous sign whose solutions converge as eps -> 0 to the Filippov
  solutions (sliding along the surfaces g_i = 0). `form="adam"` uses g / (|g| + eps), the c -> inf limit of the
  Adam ODE below. Clock t = lr * step; the discrete counterpart is `optax.sign_sgd(lr)`. It is the limit of
  Adam when beta1, beta2 are fixed and lr -> 0 (m and v then track g and g^2 on the fast clock, which needs
  lr << 1 - beta2: v averages over 1 / (1 - beta2) steps; Ma et al. 2022, Malladi et al. 2022).
- **The Adam ODE** (`adam`): optax.adam(lr, b1, b2, eps) with b1 = 1 - c1 lr, b2 = 1 - c2 lr, t = lr * step:
  dm/dt = c1 (g - m), dv/dt = c2 (g^2 - v), dtheta/dt = -mhat / (sqrt(vhat) + eps), with the bias correction as
  a time-dependent factor mhat = m / (1 - exp(-c1 t)), vhat = v / (1 - exp(-c2 t)) (the limit of
  1 - beta^step; the weights 1 - exp(-c t) are integrated as states, dw/dt = c (1 - w), w(0) = 0);
  m(0) = v(0) = 0 and at t = 0 the 0/0 takes its limit mhat = g, vhat = g^2. eps sits outside
  the square root, as in optax (eps_root = 0). References: Ma, Wu, E 2022, "A qualitative study of the dynamic
  behavior for adaptive gradient algorithms" (MSML); Barakat & Bianchi 2021, "Convergence and dynamical
  behavior of the ADAM algorithm for nonconvex stochastic optimization" (SIAM J. Optim.); Malladi, Lyu,
  Panigrahi, Arora 2022, "On the SDEs and scaling rules for adaptive gradient algorithms" (NeurIPS).

The stochastic limits (`noise.py`): the SGD SDE (`sgd_sde`, low-rank per-sample noise factor) and the Adam SDE
of the square-root scaling rule (`adam_sde`, Malladi et al. 2022: clock lr^2 * step, noise-dominated regime;
`adam_sde_hyper` gives the discrete Adam settings of one scaling).

`make_args(..., rates=)` puts parameter groups on their own clocks (leaf i's derivative times rates_i: groups
trained at learning rates rates_i * lr, as Scan and Snap's eta_Y, eta_Z or the mean field's M L scalings).
The gap between optax at rate lr and its limit at the matching clock is first order in lr (first order in
h = lr / (1 - beta) for heavy ball): tests/optim_limits/test_ode.py measures it.

`limit_problem(loss, optimizer, optim_args, batch, lr=, rates=, sign_eps=)` is the one contract of every
system's `solve_flow(optimizer="gd" | "momentum" | "sign" | "adam", optim_args=...)`: the names, defaults and
validation of `optim_args` and the groups' clocks, turned into a `Limit` and its `args`.
"""

from .noise import SGDSDE as SGDSDE
from .noise import AdamSDE as AdamSDE
from .noise import adam_sde as adam_sde
from .noise import adam_sde_hyper as adam_sde_hyper
from .noise import run_sgd as run_sgd
from .noise import sgd_sde as sgd_sde
from .noise import solve_sgd_sde as solve_sgd_sde
from .ode import Limit as Limit
from .ode import adam as adam
from .ode import adam_betas as adam_betas
from .ode import adam_rates as adam_rates
from .ode import gradient_flow as gradient_flow
from .ode import heavy_ball as heavy_ball
from .ode import momentum_friction as momentum_friction
from .ode import run_optax as run_optax
from .ode import sign_descent as sign_descent
from .ode import sign_eps as sign_eps
from .ode import solve_limit as solve_limit
from .problem import OPTIMIZERS as OPTIMIZERS
from .problem import limit_problem as limit_problem
