"""The one list of the package's systems and derivations: a new system is registered here and nowhere else.

Each `Entry` names a system's package (`flows.<name>`), its paper and documentation page, the derivations of
`derivations` that generate its flows, and, once the system runs on the shared driver, a small demo of its
spec. What reads this list: `flows` (its lazily imported subpackages), `derivations` (the registry behind
`python -m flows derive NAME` and `python -m derivations --write`), the documentation (the systems' pages in
the navigation, tests/test_docs.py) and the tests that run over every spec (tests/test_vocabulary.py,
tests/test_optimizer_contract.py, tests/test_spec_equality.py's parametrisation).

This module is plain data: importing it imports neither jax nor sympy; `load` imports what a path names.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

__all__ = ["SYSTEMS", "Demo", "Entry", "demo", "derivation_paths", "entry", "load", "names"]


@dataclasses.dataclass(frozen=True)
class Demo:
    """A small instance of a system's spec for the tests that run over every spec, and what they may assume.

    - `system`: `"module:function"`, a function of no argument returning the `flows.System`.
    - `lr`: a learning rate at which `flows.train` moves and stays finite for a few steps.
    - `blowup`: a learning rate at which full-batch gradient descent goes non-finite within 40 steps.
    - `scalar`: a scalar observable that changes along training.
    - `batch_size`: a minibatch size the spec accepts.
    """

    system: str
    lr: float
    blowup: float
    scalar: str = "loss"
    batch_size: int = 2


@dataclasses.dataclass(frozen=True)
class Entry:
    """One registered system.

    - `name`: the subpackage `flows.<name>`; `title`, `paper`: for the documentation.
    - `page`: its documentation page, relative to `docs/`.
    - `derivations`: `"module:Class"` of each `derivations.Derivation` of the system, in the order of
      `python -m derivations --write`.
    - `demo`: the `Demo` of its spec, or `None` while the system does not run on the shared driver.
    """

    name: str
    title: str
    paper: str
    page: str
    derivations: tuple[str, ...] = ()
    demo: Demo | None = None


SYSTEMS: tuple[Entry, ...] = (
    Entry(
        "scan_snap",
        "Scan and Snap",
        "Tian, Wang, Chen, Du, NeurIPS 2023",
        "systems/scan_snap.md",
        ("derivations.scan_snap:DecoderDerivation", "derivations.scan_snap:ReducedSymmetricDerivation"),
        Demo("flows.scan_snap.spec:demo", lr=0.5, blowup=1e6),
    ),
    Entry(
        "cooccurrence",
        "Word co-occurrence",
        "Yang, Kailkhura, Wang, Liang, NeurIPS 2024",
        "systems/cooccurrence.md",
        (
            "derivations.cooccurrence:Cooccurrence3TokenDerivation",
            "derivations.cooccurrence:CooccurrencePhase2Derivation",
            "derivations.cooccurrence:GramDerivation",
        ),
        Demo("flows.cooccurrence.spec:demo", lr=1e-2, blowup=1e3),
    ),
    Entry(
        "mean_field",
        "Mean-field transformer",
        "Gao et al., NeurIPS 2024",
        "systems/mean_field.md",
        ("derivations.mean_field:MeanFieldAttentionDerivation", "derivations.mean_field:MeanFieldMLPDerivation"),
        Demo("flows.mean_field.spec:demo", lr=0.1, blowup=1e6, scalar="Q"),
    ),
    Entry(
        "linear_attention",
        "Linear attention",
        "Zhang, Frei, Bartlett, JMLR 2024; Zhang, Singh, Latham, Saxe, ICML 2025",
        "systems/linear_attention.md",
        ("derivations.linear_attention:ZFBDerivation", "derivations.linear_attention:SeparateDerivation"),
        Demo("flows.linear_attention.spec:demo", lr=0.05, blowup=1e3),
    ),
    Entry(
        "joma",
        "JoMA",
        "Tian, Wang, Zhang, Chen, Du, ICLR 2024",
        "systems/joma.md",
        ("derivations.joma:ExpReducedDerivation",),
        Demo("flows.joma.spec:demo", lr=0.5, blowup=1e6),
    ),
)


def names() -> tuple[str, ...]:
    """The registered systems, in registration order."""
    return tuple(e.name for e in SYSTEMS)


def entry(name: str) -> Entry:
    """The `Entry` of system `name` (ValueError naming the registered ones otherwise)."""
    for e in SYSTEMS:
        if e.name == name:
            return e
    raise ValueError(f"name must be a registered system {names()}, got {name!r}")


def derivation_paths() -> tuple[str, ...]:
    """`"module:Class"` of every derivation of every system, in registration order."""
    return tuple(path for e in SYSTEMS for path in e.derivations)


def load(path: str) -> Any:
    """The object a `"module:name"` path names (imported on the call)."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"path must be 'module:name', got {path!r}")
    return getattr(importlib.import_module(module), attr)


def demo(name: str) -> Any:
    """The demo `flows.System` of system `name` (ValueError if it does not run on the shared driver yet)."""
    found = entry(name).demo
    if found is None:
        raise ValueError(f"name: system {name!r} has no spec demo (it does not run on the shared driver yet)")
    return load(found.system)()
