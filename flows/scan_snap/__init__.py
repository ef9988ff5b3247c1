"""Scan and Snap (Tian, Wang, Chen, Du, NeurIPS 2023, arXiv:2305.16380): 1-layer transformer, decoder Y and
attention logits Z.

- `theory`: closed forms (h(t) by eq. 45, the discrete h*(s) of eq. 33, gamma(t) of eq. 85).
- `solve_decoder`: the derived decoder h-flow integrated with `flows.solve`.
"""

from . import observables as observables
from . import theory as theory
from .data import SequenceClasses as SequenceClasses
from .data import sample_counts as sample_counts
from .data import sample_tokens as sample_tokens
from .data import syn_medium as syn_medium
from .data import syn_small as syn_small
from .data import zipfian as zipfian
from .decoder import decoder_vector_field as decoder_vector_field
from .decoder import solve_decoder as solve_decoder
from .decoder import target_probability as target_probability
from .flow import solve_flow as solve_flow
from .flow import solve_single_common_token as solve_single_common_token
from .network import TrainRecord as TrainRecord
from .network import train as train
from .network import train_sweep as train_sweep
