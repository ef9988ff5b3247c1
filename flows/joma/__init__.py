"""JoMA, the joint dynamics of MLP and attention (Tian, Wang, Zhang, Chen, Du, ICLR 2024, arXiv:2310.00535).
Equations and conventions: docs/systems/joma.md.

- `Config`, `population`, `frequencies`, `embedding`: the official synthetic data of Fig. 2/3 and the model
  choices (attention variant, MLP nonlinearity, temperature, initial scale, seed).
- `init_params`, `loss`, `make_loss`, `observe`, `make_observe`, `observe_data`: the one-layer
  network (attention, residual, MLP, cross-entropy) and its observables (`loss`, `entropy`,
  `z_estimate_corr`, `z_estimate_slope`, `invariant_gap`), in the shape of the shared spec.
- `system`, `train`, `solve_flow` (`spec`): the network as a `flows.System` and its training and limits on the
  shared driver (the joint flow, the optimisers' limits, the named limit `"w_flow"`).
- `flow`: the joint flow of (W, z) written out, the reduced flow of W alone (the invariant substituted), and
  the V-flow of Fig. 4 (`solve_v_flow`, `euler_v_flow`, `blowup_event`).
- `theory`: the invariants, the softmax estimate, the blow-up time, the limit entropy.
"""

from . import flow as flow
from . import model as model
from . import spec as spec
from . import theory as theory
from .data import ATTENTIONS as ATTENTIONS
from .data import MLPS as MLPS
from .data import ROWS as ROWS
from .data import Config as Config
from .data import embedding as embedding
from .data import frequencies as frequencies
from .data import population as population
from .flow import blowup_event as blowup_event
from .flow import euler_v_flow as euler_v_flow
from .flow import solve_v_flow as solve_v_flow
from .model import OBSERVABLES as OBSERVABLES
from .model import init_params as init_params
from .model import loss as loss
from .model import make_loss as make_loss
from .model import make_observe as make_observe
from .model import observe as observe
from .model import observe_data as observe_data
from .spec import REDUCED as REDUCED
from .spec import solve_flow as solve_flow
from .spec import system as system
from .spec import train as train
