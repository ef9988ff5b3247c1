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
import warnings
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
    """{module: its public names} of every public module the API reference documents: a module's `__all__`; a
    package's `__all__`, else every name of its `dir()` not starting with `_` (a lazy package's `__dir__`:
    `flows.SOLVERS`, `flows.solve_sde`, ...; `derivations.derive`, ...); none for a deprecated forwarder."""
    hooks, names = _hooks(), {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for module, path, is_package in hooks.public_modules():
            if hooks.is_deprecated(path):
                names[module] = []
            elif is_package:
                names[module] = hooks.public_names(module)
            else:
                names[module] = list(getattr(importlib.import_module(module), "__all__", None) or [])
    return names


def test_public_names_include_the_top_level_ones():
    """The coverage below reaches the names of the packages without `__all__`."""
    names = public_names()
    assert {"SOLVERS", "solve", "solve_sde", "Trajectory", "experiments"} <= set(names["flows"])
    assert {"derive", "available", "check_generated", "register", "gradient_flow"} <= set(names["derivations"])
    assert "annotations" not in names["derivations"]  # `from __future__ import annotations` is not an API


def test_api_index_has_no_sphinx_roles():
    """The index's one-line summaries show Sphinx roles as plain code names (mkdocstrings does not resolve
    them)."""
    hooks = _hooks()
    index = hooks._api_index(hooks.public_modules())
    assert "`is_complete`" in index  # flows.experiments.records's summary, once :func:`is_complete`
    assert not re.findall(r":\w+:`", index), re.findall(r".{40}:\w+:`.{20}", index)


def test_plain_roles_follows_the_roles_display_rule():
    plain = _hooks().plain_roles
    assert plain("see :func:`is_complete`, :mod:`a.b`, :py:func:`~a.b.c`.") == "see `is_complete`, `a.b`, `c`."
    assert plain(":func:`the title <a.b.c>` and :attr:`Finding.anchor`") == "`the title` and `Finding.anchor`"


def _documented(module: str, name: str, documented: set[str]) -> bool:
    """`module.name` is in the inventory, or, for a name a package re-exports, the object's own page is: its
    module's page for a module, its defining path for a class or function."""
    if f"{module}.{name}" in documented:
        return True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        obj = getattr(importlib.import_module(module), name)
    if isinstance(obj, type(sys)):
        return obj.__name__ in documented
    home, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(home, str) and isinstance(qualname, str):
        return home != module and f"{home}.{qualname}" in documented
    # a constant (a dict such as flows.SOLVERS): documented where the package's page says it is defined
    return any(f"{path}" in documented for attr, path in _hooks().private_exports(module) if attr == name)


def test_the_api_pages_show_no_sphinx_roles(site):
    roles = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|data|obj|exc|const|ref):<code>")
    shown = [f"{p.relative_to(site)}" for p in (site / "api").glob("*.html") if roles.search(p.read_text("utf-8"))]
    assert not shown, f"API pages with raw Sphinx roles: {shown}"


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
