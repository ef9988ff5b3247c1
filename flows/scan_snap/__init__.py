"""Scan and Snap (Tian, Wang, Chen, Du, NeurIPS 2023, arXiv:2305.16380): a 1-layer transformer with decoder Y and
attention logits Z. The data (`SequenceClasses`, Sec. 3.2), the network as a `flows.System` (`system`: the
shared driver's `flows.train`, `flows.solve_flow`, `flows.compare` run it) and this system's own entry points on
it (`train`, `train_embedding`, `train_sweep`, `train_sweeps`; `solve_flow`: the T -> infinity flows, eqs. 4-5
and 10, and the optimiser limits), the other flows (`solve_single_common_token`, eq. 13; `solve_decoder`,
Lemma 6), closed forms (`theory`) and observables (`observables`). See docs/systems/scan_snap.md."""

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
from .flow import solve_single_common_token as solve_single_common_token
from .network import train as train
from .network import train_embedding as train_embedding
from .network import train_sweep as train_sweep
from .network import train_sweeps as train_sweeps
from .spec import solve_flow as solve_flow
from .spec import system as system
