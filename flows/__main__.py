"""The command line of flows: `derive` prints a derivation, `reproduce` runs the main job.

`python -m flows derive NAME [--latex]` prints a symbolic derivation of the `derivations` package.
`python -m flows reproduce [--quick]` is the main job: it runs the example scripts (each writes a run record,
see `flows.experiments.records`), skipping examples whose record is already complete, and writes
`OUT/REPORT.md`.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m flows", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("derive", help="print a derivation (plain text or LaTeX)")
    p.add_argument("name", metavar="NAME", help="derivation name, e.g. scan_snap-decoder")
    p.add_argument("--latex", action="store_true", help="print LaTeX instead of plain text")

    p = sub.add_parser(
        "reproduce",
        help="the main job: run the example scripts and write REPORT.md",
        description=textwrap.fill(
            "The main job: run the example scripts, each writing a run record (its metrics, a verdict per "
            "prediction, the arrays behind each figure, the figures), and write OUT/REPORT.md.",
            79,
        ),
        epilog=_examples_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="pass --quick to every example")
    p.add_argument(
        "--only",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="run only these examples (script stems, listed below)",
    )
    p.add_argument("--out", default=None, help="output folder (default out/reproduce, or out/reproduce-quick)")
    p.add_argument("--force", action="store_true", help="rerun examples that are complete")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="S",
        help="pass --seed S to every example (default: each example's own seed)",
    )
    p.add_argument(
        "--examples-dir", default=None, help="folder of example scripts (default ./examples, else the checkout's)"
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=None,
        metavar="N",
        help="examples run at once, each in its own process (default: the CPUs, at most 4)",
    )
    p.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="run the examples without the persistent compilation cache (flows.experiments.compile_cache)",
    )
    return parser


def _examples_epilog() -> str:
    """The example names ``--only`` accepts (of the default examples folder), for ``reproduce --help``."""
    from flows.experiments.reproduce import find_examples_dir, list_scripts

    try:
        examples_dir = find_examples_dir(None)
    except ValueError as err:
        return f"examples: {err}"
    names = [s.stem for s in list_scripts(examples_dir)]
    if not names:
        return f"examples: none in {examples_dir}"
    try:
        examples_dir = examples_dir.relative_to(Path.cwd())
    except ValueError:  # not under the working directory: shown in full
        pass
    listing = textwrap.fill(
        " ".join(names), width=100, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False
    )
    return f"examples that --only accepts ({len(names)}, in {examples_dir}):\n{listing}"


def _enable_x64() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)


def _derive(args) -> int:
    try:
        import derivations
    except ImportError as err:
        print(f"error: the derivations package cannot be imported: {err}", file=sys.stderr)
        return 1
    available_fn = getattr(derivations, "available", None)
    if available_fn is None:
        print("error: the derivations package has no available()", file=sys.stderr)
        return 1
    names = list(available_fn())
    if args.name not in names:
        print(f"error: unknown derivation {args.name!r}; available: {', '.join(names) or '(none)'}", file=sys.stderr)
        return 2
    result = derivations.derive(args.name)
    print(result.to_latex() if args.latex else result.to_text())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help or a usage error
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.command == "derive":
        _enable_x64()
        return _derive(args)
    # The main job of `reproduce` only runs the examples (each in a process of its own, which sets its own
    # precision) and writes the report: it imports neither jax nor diffrax.
    from flows.experiments.reproduce import reproduce

    return reproduce(args, argv)


if __name__ == "__main__":
    sys.exit(main())
