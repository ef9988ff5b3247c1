"""Sharding the particle axis of the mean-field transformer over devices (`jax.sharding`): axis 1 of every
particle array is split over a one-axis mesh named `"particles"`, everything else is replicated, and XLA
inserts the all-reduces of the sums over particles. Several hosts: call `jax.distributed.initialize(...)`
first (see `examples/distributed/mean_field_multihost.py`).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = ["AXIS", "particle_mesh", "shard_particles"]

#: Name of the mesh axis that carries the particles.
AXIS = "particles"


def particle_mesh(num_devices: int | None = None) -> jax.sharding.Mesh:
    """A one-axis mesh `("particles",)` over the first `num_devices` devices (default: all of them)."""
    available = jax.device_count()
    n = available if num_devices is None else num_devices
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= available:
        raise ValueError(
            f"num_devices must be an integer in [1, {available}] (the devices JAX sees), got {num_devices!r}"
        )
    return jax.make_mesh((n,), (AXIS,), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:n])


def shard_particles(particles: dict, mesh: jax.sharding.Mesh) -> dict:
    """Place every particle array with its axis 1 (the particle index) split over `mesh`'s particle axis.

    **Raises:** `ValueError` if the mesh has no `"particles"` axis or a width is not divisible by its size.
    """
    if not isinstance(mesh, jax.sharding.Mesh) or AXIS not in mesh.axis_names:
        raise ValueError(f"mesh must be a jax.sharding.Mesh with an axis named {AXIS!r} (see particle_mesh)")
    size = mesh.shape[AXIS]
    out = {}
    for name, arr in particles.items():
        if arr.shape[1] % size:
            raise ValueError(
                f"the particle axis of {name!r} ({arr.shape[1]}) must be divisible by the {size} devices of the mesh"
            )
        spec = P(None, AXIS, *([None] * (arr.ndim - 2)))
        host = np.asarray(arr)  # every process holds the same (seeded) particles; each places its shards
        out[name] = jax.make_array_from_callback(host.shape, NamedSharding(mesh, spec), host.__getitem__)
    return out
