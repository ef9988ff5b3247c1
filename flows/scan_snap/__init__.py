"""Scan and Snap (Tian, Wang, Chen, Du, NeurIPS 2023, arXiv:2305.16380): 1-layer transformer, decoder Y and
attention logits Z.

- `SequenceClasses`, `syn_small`, `syn_medium`, `zipfian`, `sample_counts`, `sample_tokens`: the data
  (sequence classes, Sec. 3.2).
- `train`, `train_sweep`, `train_embedding`, `TrainRecord`: the finite-T model trained with optax
  (count-vector reduction, literal token sequences, the embedding form U, W_Q, W_K, W_V).
- `solve_flow`: the T->inf (Y, Z) flow or the quasi-static reduced Z-flow (eq. 10); `solve_single_common_token`
  (eq. 13); `solve_decoder`: the derived decoder h-flow (Lemma 6).
- `theory`: closed forms (h by eq. 45, h* by eq. 33, gamma by eq. 85, Gamma, B_n by eq. 129, t0', t0, the chi
  sandwich eq. 12, the pair invariant eq. 110).
- `observables`: attention c_n, f_n, entropies, common-token mass, relative gains, growth factors, knee and
  slowdown times.
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
from .network import train_embedding as train_embedding
from .network import train_sweep as train_sweep
