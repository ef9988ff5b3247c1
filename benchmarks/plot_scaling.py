"""`python -m benchmarks.plot_scaling RESULTS... --out PNG`: the scaling rows of the benchmarks on one log-log
figure, one panel per system: wall time per unit flow time (or per GD step) against the size that grows
(Scan and Snap: vocabulary M; co-occurrence: d; mean field: particles L M), with the fitted exponent.

Reads the committed results (`benchmarks/results/*.json`, lists of rows) or JSON-lines files. A scaling row
is named `<system>/<what>scaling...(<X>=<value>)` and holds `s_per_unit_time` or `s_per_step`; a fit row
(`...scaling_fit...`) holds `exponent` and `exponent_ci` (or `exponent_time_per_step`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

_POINT = re.compile(r"^(?P<system>[^/]+)/(?P<what>[^()]*scaling[^()]*)\((?P<x>[A-Za-z_]+)=(?P<value>[0-9.eE+-]+)\)$")


def read_rows(paths) -> list[dict]:
    """Rows of result files: a JSON list per file, or one JSON object per line."""
    rows = []
    for path in paths:
        text = Path(path).read_text()
        try:
            data = json.loads(text)
            rows += data if isinstance(data, list) else [data]
        except json.JSONDecodeError:
            rows += [json.loads(line) for line in text.splitlines() if line.strip()]
    return rows


def scaling_series(rows: list[dict]) -> dict:
    """{(system, what): {"x": name, "points": [(x, seconds, unit)], "fit": row or None}} (latest row wins)."""
    series: dict = defaultdict(lambda: {"x": None, "points": {}, "fit": None})
    for r in rows:
        m = _POINT.match(r.get("bench", ""))
        if m:
            y, unit = (
                (r["s_per_unit_time"], "s per unit time")
                if r.get("s_per_unit_time") is not None
                else (r.get("s_per_step"), "s per step")
            )
            if y is None:
                continue
            s = series[(m["system"], m["what"])]
            s["x"] = m["x"]
            s["points"][float(m["value"])] = (float(y), unit)
    for r in rows:
        bench = r.get("bench", "")
        if "scaling" in bench and "fit" in bench:
            system, _, what = bench.partition("/")
            what = what.replace("_fit", "").split("(")[0]
            for key in series:
                if key[0] == system and (key[1] == what or key[1].startswith(what)):
                    series[key]["fit"] = r
    return dict(series)


def _exponent(fit: dict | None):
    if not fit:
        return None, None
    value = fit.get("exponent", fit.get("exponent_time_per_step"))
    return value, fit.get("exponent_ci")


def plot(rows: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    series = scaling_series(rows)
    if not series:
        raise SystemExit("no scaling rows in the given files")
    systems = sorted({k[0] for k in series})
    fig, axes = plt.subplots(1, len(systems), figsize=(4.6 * len(systems), 3.8), squeeze=False)
    for ax, system in zip(axes[0], systems, strict=True):
        for (sys_name, what), s in sorted(series.items()):
            if sys_name != system:
                continue
            xs = sorted(s["points"])
            ys = [s["points"][x][0] for x in xs]
            unit = s["points"][xs[0]][1]
            exp, ci = _exponent(s["fit"])
            label = f"{what}, {unit}" + (f": exponent {exp:.2f}" if exp is not None else "")
            if ci:
                label += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
            ax.loglog(xs, ys, "o-", label=label)
            ax.set_xlabel(s["x"])
            ax.set_ylabel("wall time after compile (s)")
        ax.set_title(system, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend(fontsize=7)
    machine = next((r.get("machine") for r in rows if r.get("machine")), None) or {}
    dates = sorted({(r.get("machine") or {}).get("date") for r in rows} - {None})
    when = dates[0] if len(dates) == 1 else (f"{dates[0]} to {dates[-1]}" if dates else "")
    fig.suptitle(
        f"Scaling after compile ({machine.get('cores', '?')} cores, {machine.get('cpu', '')}, {when})", fontsize=9
    )
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", help="result files (JSON lists or JSON lines)")
    p.add_argument("--out", required=True, help="PNG path")
    ns = p.parse_args(argv)
    print(plot(read_rows(ns.results), Path(ns.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
