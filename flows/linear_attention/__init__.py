"""Linear attention learning linear regression in context (Zhang, Frei, Bartlett, JMLR 2024, arXiv:2306.09927;
Zhang, Singh, Latham, Saxe, ICML 2025, arXiv:2501.16265). Equations and conventions: docs/systems/linear_attention.md.

- `Config`, `covariance`, `sample`: the data model (x ~ N(0, Lambda), w ~ N(0, I), y = w^T x), seeded prompts.
- `init_params`, `predict`, `population_loss`, `effective_G`: the single head (ZFB) and the merged and separate
  multi-head forms (ZSLS), with the exact population loss (ZFB's convention, with the factor 1/2).
- `train`: GD / SGD / Adam / momentum through the shared training layer (population loss, online, fixed sample).
- `solve_flow`: the population gradient flow (all parameters by autodiff, the optimiser limits, or the generated
  reduced flows `"zfb"` and `"separate"`).
- `system`: the `flows.System` of a config, which `train` and `solve_flow` run on the shared driver
  (`flows.train`, `flows.solve_flow`, `flows.compare`).
- `observables`: functions of the parameters shared by the record and the trajectory (loss, G, alignment, ...).
- `theory`: closed forms (Gamma^{-1}, the minimum and plateau losses, shifts, the multi-head time courses).
"""

from . import observables as observables
from . import theory as theory
from .data import Config as Config
from .data import Prompts as Prompts
from .data import covariance as covariance
from .data import sample as sample
from .flow import REDUCED as REDUCED
from .flow import initial_reduced_state as initial_reduced_state
from .flow import reduced_limit as reduced_limit
from .flow import reduced_params as reduced_params
from .model import effective_G as effective_G
from .model import init_params as init_params
from .model import population_loss as population_loss
from .model import predict as predict
from .model import sample_loss as sample_loss
from .network import NetworkRecord as NetworkRecord
from .network import train as train
from .network import with_seed_init as with_seed_init
from .observables import OBSERVABLES as OBSERVABLES
from .observables import data_args as data_args
from .spec import limit_problem as limit_problem
from .spec import solve_flow as solve_flow
from .spec import system as system
from .theory import gamma_matrix as gamma_matrix
from .theory import loss_of_G as loss_of_G
from .theory import min_loss as min_loss
from .theory import optimal_G as optimal_G
from .theory import plateau_losses as plateau_losses
