"""What every example script shares: its argument parser and the four verdicts of a prediction."""

from __future__ import annotations

import argparse

__all__ = [
    "FAILS",
    "HOLDS",
    "KNOWN",
    "NOT_TESTED",
    "check_name",
    "example_parser",
    "verdict",
    "verdict_counts",
    "verdict_tag",
]


def check_name(value: object, arg: str = "name") -> str:
    """`value` if it is a non-empty string, else a ValueError naming `arg`."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{arg} must be a non-empty string, got {value!r}")
    return value


def example_parser(
    name: str, description: str, *, seed: int = 0, seed_help: str = "random seed (the same seed gives the same record)"
) -> argparse.ArgumentParser:
    """The argument parser every example shares: `--quick`, `--out` (default `out/<name>`), `--seed`,
    `--no-compile-cache`.

    Its `parse_args` also turns on the persistent compilation cache (`flows.experiments.compile_cache.enable`)
    unless `--no-compile-cache` or `FLOWS_NO_COMPILE_CACHE` says not to. Extra arguments can be added to the
    returned `argparse.ArgumentParser`.
    """
    from . import compile_cache

    class _ExampleParser(argparse.ArgumentParser):
        def parse_args(self, args=None, namespace=None):
            ns = super().parse_args(args, namespace)
            compile_cache.enable(opt_out=ns.no_compile_cache)
            return ns

    check_name(name)
    first_line = (description or name).strip().splitlines()[0]
    parser = _ExampleParser(description=first_line)
    parser.add_argument("--quick", action="store_true", help="CI-sized run")
    parser.add_argument("--out", default=f"out/{name}", help="record folder")
    parser.add_argument("--seed", type=int, default=seed, help=seed_help)
    parser.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="do not use the persistent compilation cache (flows.experiments.compile_cache)",
    )
    return parser


#: a prediction the measurement confirms
HOLDS = "holds"
#: a prediction the measurement contradicts
FAILS = "fails"
#: a prediction this run is too small to decide (its record says which size decides it)
NOT_TESTED = "not tested at this size"
#: a prediction that fails as documented in `flows.experiments.findings` (its record carries the
#: ``known_finding`` marker)
KNOWN = "known finding"


def verdict(pred: dict) -> str:
    """``"holds"``, ``"fails"``, ``"known finding"`` or ``"not tested at this size"`` of a recorded prediction.

    A failure is a known finding only when the prediction carries a ``known_finding`` marker (set by
    `RunRecord.add_prediction` from `flows.experiments.findings.known`); a marked prediction that holds holds,
    and an unmarked failure fails.
    """
    holds = pred.get("holds")
    if holds is True:
        return HOLDS
    if holds is None:
        return NOT_TESTED
    return KNOWN if pred.get("known_finding") else FAILS


_TAGS = {HOLDS: "PASS", FAILS: "FAIL", KNOWN: "KNOWN FINDING", NOT_TESTED: "NOT TESTED"}


def verdict_tag(pred: dict) -> str:
    """``PASS``, ``FAIL``, ``KNOWN FINDING`` or ``NOT TESTED`` for logs and reports."""
    return _TAGS[verdict(pred)]


def verdict_counts(preds: dict) -> str:
    """``"3 hold, 1 fails, 2 not tested at this size"`` for a ``{name: prediction}`` mapping, with
    ``", 2 known findings"`` after the failures when there are any."""
    v = [verdict(p) for p in preds.values()]
    n_known = v.count(KNOWN)
    known = f", {n_known} known finding{'' if n_known == 1 else 's'}" if n_known else ""
    return (
        f"{v.count(HOLDS)} hold, {v.count(FAILS)} fail{'s' if v.count(FAILS) == 1 else ''}{known}, "
        f"{v.count(NOT_TESTED)} not tested at this size"
    )
