"""The one table the suite prints: figure, goal, ratio and pass/fail per measured row."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass
class Row:
    """One line of the table. `ratio` compares the figure with a limit or peer measured in
    the same run (`ratio_of` says which); `passed` is None for reference rows with no goal."""

    bench: str
    measure: str
    figure: float | None
    unit: str
    goal: str = ""
    ratio: float | None = None
    ratio_of: str = ""
    passed: bool | None = None
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def show_figure(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit in ("/s", "events/s", "tok/s", "creates/s", "enqueues/s"):
        return f"{value:,.0f} {unit}" if value >= 100 else f"{value:,.1f} {unit}"
    if unit == "ms":
        return f"{value:,.1f} ms" if value < 1000 else f"{value:,.0f} ms"
    if unit == "s":
        return f"{value:,.2f} s"
    if unit == "GB/s":
        return f"{value:.2f} GB/s"
    if unit == "MB":
        return f"{value:,.0f} MB"
    if unit == "bytes":
        return f"{value:,.0f} bytes"
    if unit == "tokens":
        return f"{value:.2f} token times"
    return f"{value:,.3g} {unit}".strip()


def show_ratio(row: Row) -> str:
    if row.ratio is None:
        return ""
    return f"{row.ratio:.2f}× {row.ratio_of}".strip()


def show_pass(row: Row) -> str:
    if row.passed is None:
        return ""
    return "pass" if row.passed else "FAIL"


def table(rows: list[Row]) -> str:
    """A Markdown table (readable in a terminal; written into docs/benchmarks.md by --markdown)."""
    header = ["", "measure", "figure", "goal", "ratio", "pass"]
    body = [
        [r.bench, r.measure, show_figure(r.figure, r.unit), r.goal, show_ratio(r), show_pass(r)]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out.extend(line(cells) for cells in body)
    notes = [f"- {r.bench} {r.measure}: {r.note}" for r in rows if r.note]
    if notes:
        out.append("")
        out.extend(notes)
    return "\n".join(out)


# docs/benchmarks.md holds one current table between these markers; `make bench ARGS=
# "--markdown docs/benchmarks.md"` replaces it (older runs live in git history, not the page).
TABLE_START = "<!-- bench:table -->"
TABLE_END = "<!-- /bench:table -->"


def markdown_run(rows: list[Row], meta: dict[str, Any]) -> str:
    """The run's table with the facts a reader needs to trust it: when, which commit, what
    machine, how busy it was."""
    load = meta.get("load_before", (0.0,))[0]
    return (
        f"Run of {meta['date']} at commit `{meta['commit']}`: {meta['cpu']}, "
        f"{meta['memory_gib']} GiB, Python {meta['python']}, SQLite {meta['sqlite']}, "
        f"load average {load:.1f} before the run.\n\n{table(rows)}\n"
    )


def write_markdown(path: Path, rows: list[Row], meta: dict[str, Any]) -> None:
    """Replace the table between TABLE_START and TABLE_END in `path` with this run's."""
    text = path.read_text()
    if TABLE_START not in text or TABLE_END not in text:
        raise SystemExit(f"{path} has no {TABLE_START} … {TABLE_END} section to replace")
    before, rest = text.split(TABLE_START, 1)
    after = rest.split(TABLE_END, 1)[1]
    path.write_text(f"{before}{TABLE_START}\n{markdown_run(rows, meta)}{TABLE_END}{after}")


def write_json(path: Path, rows: list[Row], meta: dict[str, Any]) -> None:
    path.write_text(json.dumps({"meta": meta, "rows": [r.as_json() for r in rows]}, indent=2))
