"""The command line of derivations: regenerate (--write) or check (--check) the generated modules in
flows/_generated/."""

import argparse
import sys

from . import check_generated, write_all


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m derivations", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="re-derive and write every generated module")
    group.add_argument("--check", action="store_true", help="fail if a generated module is out of date")
    ns = parser.parse_args(argv)
    if ns.write:
        for path in write_all():
            print(f"wrote {path.name}")
        return 0
    stale = check_generated()
    for name, delta in stale.items():
        print(f"{name}: generated module is out of date\n{delta}")
    if not stale:
        print("all generated modules are current")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
