"""The documentation site builds with `mkdocs build --strict` (no broken links, no missing references), has a
page for each part of the site, documents every name of every public `__all__` (checked against the built
site's inventory, objects.inv), and fetches nothing from the internet when it is read.

Needs the `docs` extra (`pip install -e '.[docs]'`); skipped without mkdocs.
"""

import importlib
import importlib.util
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from flows import registry

# building the site takes tens of seconds: .ci/run runs this module after the default suite
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent

# one page per part of the site: home, getting started, the systems, the findings, the tutorial, performance,
# the API reference
PAGES = (
    "index.html",
    "getting_started.html",
    *(e.page.removesuffix(".md") + ".html" for e in registry.SYSTEMS),
    "systems/optim_limits.html",
    "systems/mean_field_pde.html",
    "findings.html",
    "tutorials/bring_your_own_theory.html",
    "performance.html",
    "api/index.html",
)


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", "mkdocs.yml", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-6000:]
    return out


def inventory(site: Path) -> set[str]:
    """The object names of the site's Sphinx inventory (objects.inv, version 2)."""
    raw = (site / "objects.inv").read_bytes()
    header = raw.split(b"\n", 4)
    assert header[0].startswith(b"# Sphinx inventory version 2"), header[0]
    body = zlib.decompress(header[4]).decode("utf-8")
    return {line.split(" ", 1)[0] for line in body.splitlines() if line.strip()}


def public_names() -> dict[str, list[str]]:
    """{module: its __all__} of every public module the API reference documents."""
    names = {}
    for module, _, _ in _hooks().public_modules():
        names[module] = list(getattr(importlib.import_module(module), "__all__", None) or [])
    return names


def test_every_part_of_the_site_has_a_page(site):
    missing = [p for p in PAGES if not (site / p).is_file()]
    assert not missing, f"pages missing from the built site: {missing}"
    # each page is in the navigation (the home page's sidebar links to every one of them)
    home = (site / "index.html").read_text(encoding="utf-8")
    unlinked = [p for p in PAGES if p != "index.html" and f'href="{p}"' not in home]
    assert not unlinked, f"pages not in the navigation: {unlinked}"


def test_one_api_page_per_public_module(site):
    modules = [m for m, _, _ in _hooks().public_modules()]
    assert {"flows", "flows.training", "flows.scan_snap.flow", "derivations.codegen"} <= set(modules)
    assert not [m for m in modules if any(part.startswith("_") for part in m.split("."))]
    missing = [m for m in modules if not (site / "api" / f"{m}.html").is_file()]
    assert not missing, f"public modules without an API page: {missing}"
    # the names a package exports from its private modules are documented on the package's page
    hooks, documented = _hooks(), inventory(site)
    exported = [
        path for m, _, is_package in hooks.public_modules() if is_package for _, path in hooks.private_exports(m)
    ]
    assert "flows._solve.solve" in exported
    assert not [p for p in exported if p not in documented], exported


def _documented(module: str, name: str, documented: set[str]) -> bool:
    """`module.name` is in the inventory, or, for a name a package re-exports, the object's own page is: its
    module's page for a module, its defining path for a class or function."""
    if f"{module}.{name}" in documented:
        return True
    obj = getattr(importlib.import_module(module), name)
    if isinstance(obj, type(sys)):
        return obj.__name__ in documented
    home, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return bool(home and qualname and home != module and f"{home}.{qualname}" in documented)


def test_every_public_name_is_documented(site):
    documented = inventory(site)
    names = public_names()
    expected = [(module, name) for module, all_ in names.items() for name in all_]
    missing = [f"{module}.{name}" for module, name in expected if not _documented(module, name, documented)]
    covered = len(expected) - len(missing)
    print(f"API coverage: {covered}/{len(expected)} public names in {len(names)} modules")
    assert len(expected) > 300
    assert not missing, f"{len(missing)} public names missing from the API reference: {missing}"


def test_generated_pages_are_current(site):
    from benchmarks import summary
    from flows.experiments import findings

    findings_page = (site / "findings.html").read_text(encoding="utf-8")
    for (stem, name), f in findings.KNOWN_FINDINGS.items():
        assert f'id="{f.anchor}"' in findings_page, f"no heading for the finding {f.anchor}"
        assert name in findings_page and stem in findings_page, (stem, name)
    performance = (site / "performance.html").read_text(encoding="utf-8")
    benches = [r["bench"] for r in summary.read_rows(summary.result_paths()) if (r.get("ratio") or {}).get("target")]
    assert benches
    for bench in benches:
        assert f"<code>{bench}</code>" in performance, f"the performance table lacks {bench}"
    assert "Machine:" in performance
    scan_snap = (site / "systems" / "scan_snap.html").read_text(encoding="utf-8")
    assert "scan_snap_fig4" in scan_snap and "known finding" in scan_snap


def test_the_site_fetches_nothing_when_read(site):
    fetched = re.compile(r"<(?:script|img|iframe)[^>]*\ssrc=\"https?://|<link[^>]*\shref=\"https?://[^\"]*\"[^>]*>")
    offenders = []
    for page in site.rglob("*.html"):
        for match in fetched.finditer(page.read_text(encoding="utf-8")):
            if 'rel="canonical"' not in match.group(0):
                offenders.append(f"{page.relative_to(site)}: {match.group(0)[:120]}")
    assert not offenders, offenders[:10]
    css = "\n".join(p.read_text(encoding="utf-8") for p in site.rglob("*.css"))
    assert "fonts.googleapis" not in css and "fonts.gstatic" not in css
    # MathJax is the local copy
    assert (site / "javascripts" / "mathjax" / "tex-svg.js").stat().st_size > 1_000_000
    assert 'src="../javascripts/mathjax/tex-svg.js"' in (site / "systems" / "scan_snap.html").read_text()
