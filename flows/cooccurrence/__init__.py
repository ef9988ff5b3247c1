"""Word co-occurrence via gradient flow (Yang, Kailkhura, Wang, Liang, NeurIPS 2024, arXiv:2410.09605).

- `Config`, `training_set`, `sample_test`: the data model (Def. 2.1, Assumption 2.3), tokens as indices.
- `init_params`, `forward`, `train`: the finite network of eq. (1) trained by GD / SGD / Adam (optax).
- `vector_field`, `initial_state`, `solve_flow`: the exact closed Gram ODE.
- `reduced`: the sympy-derived 3-token mean-field system and the 4-ODE phase-2 skeleton.
- `observables`: functions of the Gram state shared by the network record and the flow trajectory.
"""

from . import observables as observables
from . import reduced as reduced
from .data import Config as Config
from .data import Dataset as Dataset
from .data import num_random_slots as num_random_slots
from .data import sample_test as sample_test
from .data import training_set as training_set
from .flow import flow_gradients as flow_gradients
from .flow import initial_state as initial_state
from .flow import solve_flow as solve_flow
from .flow import vector_field as vector_field
from .network import TrainRecord as TrainRecord
from .network import data_args as data_args
from .network import forward as forward
from .network import init_params as init_params
from .network import network_loss as network_loss
from .network import train as train
from .network import with_seed_init as with_seed_init
from .observables import OBSERVABLES as OBSERVABLES
from .observables import gram_state as gram_state
