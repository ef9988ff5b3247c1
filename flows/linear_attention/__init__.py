"""Linear attention learning linear regression in context (Zhang, Frei, Bartlett, JMLR 2024, arXiv:2306.09927;
Zhang, Singh, Latham, Saxe, ICML 2025, arXiv:2501.16265).

- `theory`: closed forms (Gamma, its inverse, the minimum and plateau losses, the shift losses, the multi-head
  time courses).
"""

from . import theory as theory
from .theory import gamma_matrix as gamma_matrix
from .theory import loss_of_G as loss_of_G
from .theory import min_loss as min_loss
from .theory import optimal_G as optimal_G
from .theory import plateau_losses as plateau_losses
