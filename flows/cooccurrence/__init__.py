"""Word co-occurrence via gradient flow (Yang, Kailkhura, Wang, Liang, NeurIPS 2024, arXiv:2410.09605).

- `Config`, `training_set`, `sample_test`: the data model (Def. 2.1, Assumption 2.3), tokens as indices.
- `system`: the system as a `flows.System` (`spec`): the network of eq. (1) (`init_params`, `forward`,
  `network_loss`), its data (`spec.data`), observables and named limits; `train` (GD / SGD / Adam) and
  `solve_flow` run it on the shared driver.
- `vector_field`, `initial_state`: the exact closed Gram ODE (the limit `"gram"`).
- `reduced`: the sympy-derived 3-token mean-field system and the 4-ODE phase-2 skeleton (`"three_token"`,
  `"phase2"`).
- `observables`: functions of the Gram state shared by the network record and the flow trajectory.
"""

from . import observables as observables
from . import reduced as reduced
from . import spec as spec
from .data import Config as Config
from .data import Dataset as Dataset
from .data import num_random_slots as num_random_slots
from .data import sample_test as sample_test
from .data import training_set as training_set
from .flow import flow_gradients as flow_gradients
from .flow import initial_state as initial_state
from .flow import vector_field as vector_field
from .network import forward as forward
from .network import init_params as init_params
from .network import network_loss as network_loss
from .observables import OBSERVABLES as OBSERVABLES
from .observables import gram_state as gram_state
from .spec import loss as loss
from .spec import solve_flow as solve_flow
from .spec import system as system
from .spec import train as train
from .spec import with_seed_init as with_seed_init
