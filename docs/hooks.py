"""mkdocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

- The API reference: one page per public module of ``flows`` and ``derivations``, found by walking the
  packages' folders (modules and packages whose name starts with ``_`` and ``__main__`` are skipped; a
  deprecated forwarder gets a page with its docstring only), each page a mkdocstrings ``::: module`` block,
  listed in the navigation under "API reference". A new module appears without an edit here. A package's
  page documents every public name it exports (`public_names`): those it defines itself, and the classes,
  functions and constants of its private modules (`private_exports`, e.g. ``flows.SOLVERS``).
- Sphinx roles in docstrings (``:func:`name```, ``:mod:`name```, ...) are shown as the plain code name, on the
  API index (`plain_roles`) and on the rendered pages (`on_page_content`): mkdocstrings does not resolve them.
- MathJax: the site renders its LaTeX with the copy of MathJax 3 (``tex-svg.js``, fonts included as paths)
  that the ``django-static-mathjax`` package installs, copied into the built site: nothing is fetched at
  view time.
- Generated tables, replacing a marker line in a page's Markdown at build time:
  ``<!-- generated: benchmarks -->`` (``benchmarks.summary.table`` of ``benchmarks/results/*.json``),
  ``<!-- generated: findings -->`` (``flows.experiments.findings.markdown()``) and
  ``<!-- generated: predictions STEM ... -->`` (the predictions and verdicts of those examples in the
  committed ``--quick`` record ``benchmarks/results/reproduce_quick.json``).
"""

from __future__ import annotations

import ast
import importlib
import json
import logging
import re
import sys
import types
import warnings
from pathlib import Path

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.docs")
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("flows", "derivations")
API_DIR = "api"
MATHJAX_URI = "javascripts/mathjax/tex-svg.js"
_MARKER = re.compile(r"^<!-- generated: (\w+)(.*?)-->$", re.MULTILINE)


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def is_deprecated(path: Path) -> bool:
    """True for a module kept as a deprecated forwarder (its docstring starts with "Deprecated")."""
    return _docstring(path).startswith("Deprecated")


def public_modules() -> list[tuple[str, Path, bool]]:
    """(dotted name, source file, is a package) of every public module of `PACKAGES`, in walking order.

    **Returns:** the packages first in each folder, then their modules by name.
    """
    found: list[tuple[str, Path, bool]] = []

    def walk(folder: Path, dotted: str) -> None:
        found.append((dotted, folder / "__init__.py", True))
        for child in sorted(folder.iterdir()):
            if child.name.startswith("_"):
                continue
            if child.is_dir() and (child / "__init__.py").is_file():
                walk(child, f"{dotted}.{child.name}")
            elif child.suffix == ".py":
                found.append((f"{dotted}.{child.stem}", child, False))

    for pkg in PACKAGES:
        walk(ROOT / pkg, pkg)
    return found


_ROLE_NAMES = "func|meth|class|mod|attr|data|obj|exc|const|ref"
# :func:`name`, :py:func:`~a.b.name`, :func:`title <a.b.name>`
_ROLE = re.compile(rf":(?:py:)?(?:{_ROLE_NAMES}):`(~?)([^`<]*?)\s*(?:<[^>`]*>)?`")
# the same roles after Markdown made their backquotes a <code> element
_ROLE_HTML = re.compile(rf":(?:py:)?(?:{_ROLE_NAMES}):<code>(~?)([^<]*)</code>")


def _role_name(match: re.Match) -> str:
    tilde, name = match.group(1), match.group(2).strip()
    return name.rsplit(".", 1)[-1] if tilde else name


def plain_roles(text: str) -> str:
    """`text` with every Sphinx role written as the plain code name: ``:func:`a.b` `` becomes ```a.b` ``,
    ``:func:`~a.b` `` becomes ```b` `` (the role's own display rule)."""
    return _ROLE.sub(lambda m: f"`{_role_name(m)}`", text)


def _summary(path: Path) -> str:
    first = _docstring(path).split("\n\n", 1)[0]
    return " ".join(plain_roles(first).split())


def public_names(package: str) -> list[str]:
    """The public names of a package: its ``__all__``, else the names of ``dir(package)`` (a lazy package's
    ``__dir__``) that do not start with ``_`` and are not ``from __future__`` features."""
    import __future__

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pkg = importlib.import_module(package)
        names = getattr(pkg, "__all__", None)
        if names is not None:
            return list(names)
        future = {n: getattr(__future__, n) for n in __future__.all_feature_names}
        return [n for n in dir(pkg) if not n.startswith("_") and getattr(pkg, n, None) is not future.get(n, ())]


def _assigned(path: Path, name: str) -> bool:
    """`name` is assigned at the top level of the module file `path` (``NAME = ...`` or ``NAME: T = ...``)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def _constant_home(package: str, name: str, obj) -> str | None:
    """The private module of `package` that assigns the constant `obj` (no ``__module__``, e.g. a dict) at
    its top level under `name`, found among the package's own ``_*.py`` files."""
    folder = ROOT.joinpath(*package.split("."))
    for path in sorted(folder.glob("_*.py")):
        if path.stem.startswith("__") or not _assigned(path, name):
            continue
        module = importlib.import_module(f"{package}.{path.stem}")
        if getattr(module, name, None) is obj:
            return f"{package}.{path.stem}"
    return None


def private_exports(package: str) -> list[tuple[str, str]]:
    """(public name, defining path) of the classes and functions that `package` exports (its ``__all__``, or
    its public attributes) from a private module, such as ``flows.solve`` from ``flows._solve``: no page of
    their own documents them, so the package's page does.

    **Arguments:**

    - `package`: the dotted name of a package of `PACKAGES`.

    **Returns:** the pairs, in the order of the package's names.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pkg = importlib.import_module(package)
        found = []
        for attr in public_names(package):
            obj = getattr(pkg, attr)
            if isinstance(obj, types.ModuleType):
                continue
            home, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
            if not isinstance(home, str) or not isinstance(qualname, str):  # a constant: a dict, a tuple, ...
                home, qualname = _constant_home(package, attr, obj), attr
                if home is None:
                    continue
            parts = home.split(".")
            if parts[0] in PACKAGES and any(p.startswith("_") for p in parts):
                found.append((attr, f"{home}.{qualname}"))
    return found


def own_members(package: str) -> list[str]:
    """The public classes and functions that `package`'s ``__init__`` defines itself (``derivations.derive``),
    which its page documents as members."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pkg = importlib.import_module(package)
        return [n for n in public_names(package) if getattr(getattr(pkg, n), "__module__", None) == package]


def _api_page(name: str, is_package: bool, children: list[str], deprecated: bool = False) -> str:
    lines = [f"::: {name}"]
    if deprecated:
        return "\n".join(lines + ["    options:", "      members: false", ""])
    if is_package:
        members = own_members(name)
        lines += ["    options:", f"      members: {json.dumps(members) if members else 'false'}", ""]
        exported = private_exports(name)
        if exported:
            lines += [
                f"**Defined in `{name}`'s private modules** (imported as `{name}.NAME`):",
                "",
                *[
                    f"::: {path}\n    options:\n      heading_level: 2\n      show_root_full_path: false\n"
                    for _, path in exported
                ],
            ]
        if children:
            lines += ["**Modules:**", ""]
            lines += [f"- [`{c}`]({c}.md)" for c in children]
    return "\n".join(lines) + "\n"


def _children(name: str, modules: list[tuple[str, Path, bool]]) -> list[str]:
    depth = name.count(".") + 1
    return [m for m, _, _ in modules if m.startswith(name + ".") and m.count(".") == depth]


def _api_index(modules: list[tuple[str, Path, bool]]) -> str:
    lines = [
        "# API reference",
        "",
        "One page per public module of `flows` and `derivations`, generated from the docstrings when the site "
        "is built (the list of modules is found by walking the packages). Each module's public names are those "
        "of its `__all__`; the packages re-export the names a user needs (`flows.solve`, "
        "`flows.cooccurrence.train`, ...), documented in the module that defines them.",
        "",
        "| module | what it is |",
        "|---|---|",
    ]
    for name, path, _ in modules:
        lines.append(f"| [`{name}`]({name}.md) | {_summary(path).replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _api_nav(modules: list[tuple[str, Path, bool]]) -> list:
    """Navigation of the API reference: the index, then one section per package with its modules."""
    nav: list = [f"{API_DIR}/index.md"]
    for name, _, is_package in modules:
        if not is_package:
            continue
        entries: list = [{name: f"{API_DIR}/{name}.md"}]
        for child, _, child_is_package in modules:
            if child.startswith(name + ".") and child.count(".") == name.count(".") + 1 and not child_is_package:
                entries.append({child: f"{API_DIR}/{child}.md"})
        nav.append({name: entries})
    return nav


def on_config(config):
    if str(ROOT) not in sys.path:  # the hooks import the checkout's benchmarks and flows
        sys.path.insert(0, str(ROOT))
    modules = public_modules()
    docs = Path(config["docs_dir"])
    nav = config.get("nav") or []
    for i, item in enumerate(nav):
        if isinstance(item, dict) and "API reference" in item:
            nav[i] = {"API reference": _api_nav(modules)}
        elif isinstance(item, dict) and "Systems" in item:
            # the registered systems' pages (flows.registry, the one list of systems), then the section's own
            # pages (the shared layers); a system's page is written with its package, until then the site
            # builds without it
            from flows import registry

            listed = [{e.title: e.page} for e in registry.SYSTEMS]
            pages = listed + [e for e in item["Systems"] or [] if e not in listed]
            present = [e for e in pages if (docs / next(iter(e.values()))).is_file()]
            for e in pages:
                if e not in present:
                    log.info("docs: no page %s yet; left out of the navigation", next(iter(e.values())))
            nav[i] = {"Systems": present}
    return config


def _mathjax_file(config) -> File:
    try:
        import mathjax  # django-static-mathjax: MathJax 3's distribution as package data
    except ImportError as err:
        raise RuntimeError("the docs need the `docs` extra: pip install -e '.[docs]' (django-static-mathjax)") from err
    src = Path(mathjax.__file__).resolve().parent / "static" / "mathjax" / "es5" / "tex-svg.js"
    if not src.is_file():
        raise RuntimeError(f"django-static-mathjax has no {src.name}: reinstall the `docs` extra")
    return File.generated(config, MATHJAX_URI, abs_src_path=str(src))


def on_files(files: Files, config) -> Files:
    modules = public_modules()
    for name, path, is_package in modules:
        page = _api_page(name, is_package, _children(name, modules), is_deprecated(path))
        files.append(File.generated(config, f"{API_DIR}/{name}.md", content=page))
    files.append(File.generated(config, f"{API_DIR}/index.md", content=_api_index(modules)))
    files.append(_mathjax_file(config))
    return files


# ------------------------------------------------------------------------------------------ generated tables


def _benchmarks() -> str:
    from benchmarks import summary

    return summary.table(summary.read_rows(summary.result_paths()))


def _findings() -> str:
    """One heading per known finding (its id is the anchor that records and reports link to), with the
    predictions it covers, the paper's claim, the full run's measurement and the reason."""
    from benchmarks.reproduce_times import RESULTS
    from flows.experiments import findings

    recorded = json.loads(RESULTS.read_text(encoding="utf-8")).get("predictions") or {}
    groups: dict[str, tuple] = {}
    for (stem, name), f in findings.KNOWN_FINDINGS.items():
        groups.setdefault(f.anchor, (f, []))[1].append((stem, name))
    parts = []
    for anchor, (f, keys) in groups.items():
        where = "; ".join(f"`{stem}`: `{name}`" for stem, name in keys)
        quick = "" if f.at_quick else " Not decided at `--quick` size (the quick run records it as not tested)."
        record = [
            f"`{name}` = {_cell(p.get('measured'))} ({p.get('verdict')})"
            for stem, name in keys
            if (p := (recorded.get(stem) or {}).get(name))
        ]
        quick_line = f"*In the committed `--quick` record:* {'; '.join(record)}.\n\n" if record else ""
        parts.append(
            f"### {f.title} {{#{anchor}}}\n\n*Predictions:* {where}.\n\n*Paper:* {f.claim}.\n\n"
            f"*Measured (full run):* {f.measured}.\n\n{quick_line}*Why:* {f.reason}.{quick}\n"
        )
    return "\n".join(parts)


def _text(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_text(v)}" for k, v in value.items())
    return str(value)


def _cell(value) -> str:
    """`value` as the literal text of a Markdown table cell: no emphasis, code, links or HTML."""
    text = _text(value)
    for char in "\\|*_`[]":
        text = text.replace(char, "\\" + char)
    return text.replace("<", "&lt;").replace("\n", " ")


def _predictions(stems: list[str]) -> str:
    from benchmarks.reproduce_times import RESULTS

    data = json.loads(RESULTS.read_text(encoding="utf-8"))
    preds = data.get("predictions") or {}
    lines = [
        f"From the committed `--quick` record (`{data.get('command')}`, {data.get('date')}): ",
        "",
        "| example | prediction | measured | expected | verdict |",
        "|---|---|---|---|---|",
    ]
    count = 0
    for stem in stems:
        for name, p in (preds.get(stem) or {}).items():
            verdict = p.get("verdict", "")
            if p.get("known_finding"):
                verdict = f"[{verdict}](../findings.md#{p['known_finding']})"
            elif verdict == "not tested at this size" and p.get("tested_at"):
                verdict = f"{verdict} (decided by {p['tested_at']})"
            lines.append(
                f"| `{stem}` | `{name}` | {_cell(p.get('measured'))} | {_cell(p.get('expected', ''))} | "
                f"{_cell(verdict) if not p.get('known_finding') else verdict} |"
            )
            count += 1
    absent = [stem for stem in stems if stem not in preds]
    if absent:  # an example newer than the record (tests/test_reproduce_ux.py asks for a new record)
        names = ", ".join(f"`{stem}`" for stem in absent)
        lines += [
            "",
            f"Not in the committed record yet: {names} (`python -m flows reproduce --quick --out DIR`, then "
            "`python -m benchmarks.reproduce_times DIR`, writes it).",
        ]
    if not count and not absent:
        raise RuntimeError(f"no predictions for {stems} in {RESULTS.name}")
    return "\n".join(lines if count else lines[-1:])


def on_page_content(html: str, page, config, files) -> str:
    """The API pages' docstrings with their Sphinx roles as plain code names (`plain_roles`)."""
    if not page.file.src_uri.startswith(f"{API_DIR}/"):
        return html
    return _ROLE_HTML.sub(lambda m: f"<code>{_role_name(m)}</code>", html)


def on_page_markdown(markdown: str, page, config, files) -> str:
    def replace(match: re.Match) -> str:
        kind, rest = match.group(1), match.group(2).split()
        if kind == "benchmarks":
            return _benchmarks()
        if kind == "findings":
            return _findings()
        if kind == "predictions":
            return _predictions(rest)
        raise RuntimeError(f"{page.file.src_uri}: unknown generated block {kind!r}")

    return _MARKER.sub(replace, markdown)
