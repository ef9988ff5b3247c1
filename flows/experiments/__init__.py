"""The experiment tooling: what the example scripts and ``python -m flows reproduce`` use, never the solvers.

- `records`: run records (metrics.json, series.npz, PNGs, meta.json), written atomically; re-exports the
  example parser and the verdicts of `examples` and the writers of `atomic`.
- `findings`: the predictions of the papers that the full runs measure to fail, each with its reason.
- `report`: ``REPORT.md`` of ``reproduce``; `reproduce`: the command that runs the examples.
- `compile_cache`: JAX's persistent compilation cache, turned on by the entry points only.
- `plotting`: the figure style of the examples; `provenance`: the versions a record stores.

Each submodule is imported on its own (``from flows.experiments import records``): a records-only script
imports neither jax nor matplotlib.
"""
