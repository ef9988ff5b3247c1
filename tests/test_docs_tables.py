"""The Markdown tables of the documentation pages keep their columns: an unescaped `|` inside a cell, e.g. the
absolute value bars of `$|Q_M - Q|$`, splits the row before the maths is typeset (write `\\lvert ... \\rvert`),
so the row shows raw TeX and its later cells move one column to the right. Fast: reads the Markdown only.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").rglob("*.md"))
_RULE = re.compile(r"\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*")
_SPLIT = re.compile(r"(?<!\\)\|")


def cells(line: str) -> list[str]:
    """The cells of a table row as Python-Markdown's `tables` extension splits them (unescaped pipes; the
    leading and trailing pipe are the row's border)."""
    text = line.strip()
    text = text[1:] if text.startswith("|") else text
    text = text[:-1] if text.endswith("|") and not text.endswith("\\|") else text
    return _SPLIT.split(text)


def tables(text: str):
    """(line number of the header, header cells, [(line number, cells) of each body row]) of every table
    outside fenced code."""
    lines, fenced = text.splitlines(), False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or "|" not in line or i + 1 >= len(lines) or not _RULE.fullmatch(lines[i + 1]):
            continue
        rows, j = [], i + 2
        while j < len(lines) and "|" in lines[j] and lines[j].strip():
            rows.append((j + 1, cells(lines[j])))
            j += 1
        yield i + 1, cells(line), rows


def test_cells_split_like_the_tables_extension():
    assert cells("| a | b |") == [" a ", " b "]
    assert cells(r"| a \| b | c |") == [r" a \| b ", " c "]
    assert len(cells(r"| $|u|^2$ | c |")) == 4  # the bars of the absolute value split the row
    assert len(cells(r"| $\lvert u\rvert^2$ | c |")) == 2
    found = list(tables("| h1 | h2 |\n|---|---|\n| a | b |\n| c | $|d|$ |\n\n```\n| x |\n|---|\n```\n"))
    assert [(n, len(h), [len(c) for _, c in rows]) for n, h, rows in found] == [(1, 2, [2, 4])]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_every_table_row_has_the_header_s_columns(page):
    bad = [
        f"{page.relative_to(ROOT)}:{n}: {len(row)} cells, the header at line {at} has {len(header)}"
        for at, header, rows in tables(page.read_text(encoding="utf-8"))
        for n, row in rows
        if len(row) != len(header)
    ]
    assert not bad, "a | inside a cell splits the row (write \\lvert ... \\rvert in maths, \\| in text):\n" + "\n".join(
        bad
    )
