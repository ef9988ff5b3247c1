"""Scan and Snap (Tian, Wang, Chen, Du, NeurIPS 2023, arXiv:2305.16380): 1-layer transformer, decoder Y and
attention logits Z.

- `theory`: closed forms (h(t) by eq. 45, the discrete h*(s) of eq. 33, gamma(t) of eq. 85).
- `solve_decoder`: the derived decoder h-flow integrated with `flows.solve`.
"""

from . import theory as theory
from .decoder import decoder_vector_field as decoder_vector_field
from .decoder import solve_decoder as solve_decoder
from .decoder import target_probability as target_probability
