"""Train the mean-field transformer with its particle axis sharded over the devices of several processes.

Every process runs this same script; `jax.distributed.initialize` connects them, and the one-axis mesh of
`flows.mean_field.particle_mesh()` then spans the devices of all processes: the M heads and M_mlp neurons of
every layer are split over them, and XLA inserts the all-reduces of the forward and backward passes. Nothing
else changes: `train` and `solve_flow` take the mesh as they do on one host.

Two processes on this machine (CPU devices, gloo collectives), e.g. in two shells:

    python examples/distributed/mean_field_multihost.py --coordinator 127.0.0.1:12355 --num-processes 2 --process-id 0
    python examples/distributed/mean_field_multihost.py --coordinator 127.0.0.1:12355 --num-processes 2 --process-id 1

On a cluster (Slurm, Open MPI, TPU pods) `jax.distributed.initialize()` detects its arguments: pass
`--auto`. Without any of these flags the script runs in one process on its local devices. Process 0 prints
Q along the run and checks it against an unsharded run in the same process (`--check`).
"""

from __future__ import annotations

import argparse

import jax


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--coordinator", default=None, help="host:port of process 0")
    p.add_argument("--num-processes", type=int, default=None)
    p.add_argument("--process-id", type=int, default=None)
    p.add_argument("--auto", action="store_true", help="let jax.distributed.initialize detect its arguments")
    p.add_argument("--local-devices", type=int, default=1, help="CPU devices per process (CPU backend only)")
    p.add_argument("--M", type=int, default=16, help="heads per layer (divisible by the total device count)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--check", action="store_true", help="compare with an unsharded run (process 0 prints)")
    ns = p.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    try:
        jax.config.update("jax_num_cpu_devices", ns.local_devices)
    except RuntimeError:  # the backend is already up (the script was imported): keep its devices
        pass
    if ns.auto or ns.coordinator is not None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # cross-process collectives on CPU
        if ns.auto:
            jax.distributed.initialize()
        else:
            jax.distributed.initialize(ns.coordinator, ns.num_processes, ns.process_id)

    import numpy as np

    from flows import mean_field as mf

    mesh = mf.particle_mesh()  # every device of every process
    cfg = mf.Config(d=3, D=4, N=8, L=4, M=ns.M, n_train=64, lam=1e-3, init_scale=2.0, seed=0)
    rec = mf.train(cfg, "gd", 0.2, ns.steps, save_every=max(1, ns.steps // 4), mesh=mesh)
    me = jax.process_index()
    if me == 0:
        print(
            f"{jax.process_count()} process(es), {jax.device_count()} devices; particle axis sharded "
            f"{mesh.shape}; tau = {rec.tau.tolist()}; Q = {np.round(rec['Q'], 10).tolist()}"
        )
    if ns.check:
        ref = mf.train(cfg, "gd", 0.2, ns.steps, save_every=max(1, ns.steps // 4))
        gap = float(np.max(np.abs(ref["Q"] - rec["Q"])))
        if me == 0:
            print(f"sharded vs unsharded: max |Q gap| = {gap:.2e}")
        if gap > 1e-12:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
