"""Every generated module equals a fresh emission of its derivation (derive -> codegen -> import)."""

import derivations


def test_every_generated_module_is_current():
    stale = derivations.check_generated()
    assert not stale, "generated modules out of date (run `python -m derivations --write`):\n" + "\n".join(
        stale.values()
    )


def test_registry_lists_the_decoder():
    assert "scan_snap-decoder" in derivations.available()
    d = derivations.derive("scan_snap-decoder")
    assert "eta_Y" in d.to_text() and r"\eta_{Y}" in d.to_latex()
