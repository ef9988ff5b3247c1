"""Mean-field transformer (Gao, Cao, Li, He, Wang, Liu, Klusowski, Fan, *Global convergence in training
large-scale transformers*, NeurIPS 2024, arXiv:2410.23610).

- `Config`, `Prompts`, `training_set`, `sample_prompts`, `held_out_set`: in-context linear regression with
  bounded support, embedded as Z0 (n, D, N + 1).
- `model`: `forward`, `risk`, `objective` of the finite residual transformer of depth L and width M
  (eqs. 2.1-2.3); `gradients`: `velocity`, its particle velocity (first-variation form or autodiff);
  `initial`: `init_particles`, `init_curves`.
- `spec`: `system(config)`, the `flows.System` of the finite network (loss Q, observables, the groups'
  clocks M L and M_mlp L, the particle flow and the reference as named limits); `solve_flow` (the particle
  flow, or the optimiser limits "gd", "momentum", "sign", "adam" of the driver) and `solve_reference`, thin
  calls of the shared driver.
- `network`: `train`: GD, SGD, heavy ball or Adam with optax at learning rate eta_tau M L on the shared driver
  (`flows.train(system(config), ...)`), recording a `flows.training.NetworkRecord`.
- `flow`: `vector_field`, the particle Wasserstein gradient flow in training time tau (`particle_limit`).
- `reference`: the continuous-depth (tied) reference, depth integrated by diffrax, gradients by an adjoint.
- `observables`: Q, R, dissipation, speeds, errors, W2 per depth slice, coupled RMS, first variation.
- `coupling`: coupled initialisations (`subsample_particles`: a width-M subsample of a reference cloud;
  `sample_depth`: a depth-L network on the reference's depth curves).
- `sweep`: `train_gd_seeds` (several seeds of one shape) and `train_gd_batch` (given particles and data,
  e.g. coupled subsamples), each one vmapped GD program per shape, recorded in one `NetworkRecord`.
- `sharding`: the particle axis split over devices (`particle_mesh`, `shard_particles`).
- `chart`: the charted model (every head, and neuron, given by p = 1 or 2 scalars through a fixed linear chart;
  `Chart`, `solve_charted`, `train_charted`); `grid`: its Wasserstein gradient flow solved on a grid per depth
  slice (`GridFlow`, `solve_grid`, the spec's limit `grid_limit`: conservative finite volumes,
  docs/systems/mean_field_pde.md); `grid_laws`:
  initial laws as cell masses and samples, the OU closed form, W2 between a cloud and a grid law.
- `noise`: the noisy (Fokker-Planck) flow: `solve_particles_sde` (particle Langevin SDE at temperature T),
  Kozachenko-Leonenko entropy per depth slice, the entropy-regularised objective F = Q - T H.
"""

from . import chart as chart
from . import coupling as coupling
from . import gradients as gradients
from . import grid as grid
from . import grid_laws as grid_laws
from . import initial as initial
from . import model as model
from . import network as network
from . import noise as noise
from . import observables as observables
from . import reference as reference
from . import sharding as sharding
from . import spec as spec
from . import sweep as sweep
from .coupling import sample_depth as sample_depth
from .coupling import subsample_particles as subsample_particles
from .data import INITS as INITS
from .data import Config as Config
from .data import Prompts as Prompts
from .data import held_out_set as held_out_set
from .data import sample_prompts as sample_prompts
from .data import training_set as training_set
from .flow import vector_field as vector_field
from .gradients import velocity as velocity
from .initial import init_curves as init_curves
from .initial import init_particles as init_particles
from .model import attention_update as attention_update
from .model import check_particles as check_particles
from .model import forward as forward
from .model import huberized_relu as huberized_relu
from .model import mlp_update as mlp_update
from .model import objective as objective
from .model import risk as risk
from .network import train as train
from .noise import solve_particles_sde as solve_particles_sde
from .sharding import particle_mesh as particle_mesh
from .sharding import shard_particles as shard_particles
from .spec import solve_flow as solve_flow
from .spec import solve_reference as solve_reference
from .spec import system as system
from .spec import with_seed_init as with_seed_init
from .sweep import train_gd_batch as train_gd_batch
from .sweep import train_gd_seeds as train_gd_seeds
