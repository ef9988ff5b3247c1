"""The committed generated modules of the linear-attention derivations equal a fresh emission."""

from derivations import linear_attention as la


def test_generated_modules_are_current():
    stale = la.diff()
    assert not stale, f"generated modules out of date (run derivations.linear_attention.write()): {sorted(stale)}"
