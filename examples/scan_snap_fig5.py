"""Scan and Snap, Fig. 5: c_n heat maps on Syn-Small trained with Adam, eta_Y = eta_Z in {0.1, 0.5, 1}
(batch 128, T = 128, zero init), next to the T -> inf gradient flow at the same rates.

Tian, Wang, Chen, Du, "Scan and Snap", NeurIPS 2023, Fig. 5 (empirical; the theory makes no Adam
prediction). The flow is the SGD limit, shown for contrast (time = Adam step). The distinct-token prediction reads
the mean change over the runs of `scan_snap_fig4.DRAWS` seeds, as in Fig. 4. Writes a run record plus
loss_trace.json {"eta0.1": [...], ...}. --quick: 30 iterations.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scan_snap_fig4 as fig4  # noqa: E402

from flows.experiments import records  # noqa: E402

NAME = "scan_snap_fig5"


def main(argv=None) -> int:
    ns = records.example_parser(NAME, __doc__, seed=2, seed_help="training seed").parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    settings = {f"eta{e:g}": (e, e) for e in (0.1, 0.5, 1.0)}
    config = {"quick": ns.quick, "optimizer": "adam", "T": 128, "batch": 128, "init": "zero"}
    with records.RunRecord(ns.out, name=NAME, config=config, seed=ns.seed, quick=ns.quick) as rec:
        traces = fig4.run(
            rec,
            ns.quick,
            ns.seed,
            optimizer="adam",
            momentum=0.0,
            settings=settings,
            name_fig="fig5_adam_heatmaps.png",
            title="Fig. 5 (Adam)",
        )
        records.atomic_write_json(rec.out_dir / "loss_trace.json", traces)
    records.log_predictions(rec, logging.getLogger(NAME))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
