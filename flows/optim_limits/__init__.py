"""Continuous-time limits of the optimisers the networks are trained with.

Every limit takes a loss `loss(theta, batch)` written in JAX and returns a `Limit` (a vector field for
`flows.solve`, `initial_state`, `params`, `make_args`: the data and the rates travel in `args`). The
deterministic limits (`ode.py`): gradient flow, heavy-ball momentum (Kovachki & Stuart 2021, JMLR), smoothed
sign descent and the Adam ODE (Ma, Wu, E 2022; Barakat & Bianchi 2021; Malladi et al. 2022), held against
optax (`run_optax`). The stochastic limits (`noise.py`): the SGD SDE and the Adam SDE. `limit_problem` is
the one contract of every system's `solve_flow(optimizer=..., optim_args=...)`.

See docs/systems/optim_limits.md.
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
