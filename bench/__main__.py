"""`python -m bench` (`make bench`): runs the benchmarks and prints one table of figures and
ratios measured in the same run.

    python -m bench [--quick] [--only B1,B3] [--json out.json] [--markdown docs/benchmarks.md]
                    [--workdir DIR]
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench.common import ROOT
from bench.report import Row, table, write_json, write_markdown

BENCHES = {
    "B1": "bench.b1_accept",
    "B2": "bench.b2_events",
    "B3": "bench.b3_stream",
    "B4": "bench.b4_recovery",
    "B5": "bench.b5_purge",
    "B6": "bench.b6_digests",
    "B7": "bench.b7_gui",
    "B8": "bench.b8_cancel",
    "B9": "bench.b9_concurrency",
    "B10": "bench.b10_memory",
    "B11": "bench.b11_turns",
    "B12": "bench.b12_grammar",
    "B13": "bench.b13_upstream",
    "B14": "bench.b14_chat_stream",
    "B15": "bench.b15_fit",
    "B20": "bench.b20_sources",
    "B21": "bench.b21_download",
    "B17": "bench.b17_engine_crash",
    "B18": "bench.b18_embeddings",
    "B16": "bench.b16_prefill",
    "B19": "bench.b19_anthropic_stream",
}


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "commit": commit,
        "cpu": f"{cpu}, {os.cpu_count()} cores",
        "memory_gib": round(mem, 1),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "load_before": os.getloadavg(),
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test)")
    parser.add_argument("--only", default="", help="comma-separated ids, e.g. B1,B3")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    parser.add_argument(
        "--markdown", type=Path, help="replace the table in this page (docs/benchmarks.md)"
    )
    parser.add_argument("--workdir", type=Path, help="keep the databases here (default: temp)")
    args = parser.parse_args(argv)
    wanted = [b.strip().upper() for b in args.only.split(",") if b.strip()] or list(BENCHES)
    unknown = [b for b in wanted if b not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
    args.wanted = wanted
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    meta = machine()
    meta["quick"] = args.quick
    print(
        f"LMSP Desktop benchmarks {'(quick) ' if args.quick else ''}— {meta['date']}, commit "
        f"{meta['commit']}, {meta['cpu']}, {meta['memory_gib']} GiB, Python {meta['python']}, "
        f"SQLite {meta['sqlite']}, load average {meta['load_before'][0]:.1f}",
        flush=True,
    )
    work = args.workdir or Path(tempfile.mkdtemp(prefix="lmsp-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    crashed = []
    took: dict[str, float] = {}
    try:
        for bench in args.wanted:
            started = time.perf_counter()
            print(f"{bench} …", end=" ", flush=True)
            try:
                module = importlib.import_module(BENCHES[bench])
                (work / bench.lower()).mkdir(parents=True, exist_ok=True)
                found: list[Row] = module.run(work / bench.lower(), args.quick)
                rows.extend(found)
            except Exception as exc:
                traceback.print_exc()
                crashed.append(bench)
                rows.append(Row(bench, "crashed", None, "", note=f"{type(exc).__name__}: {exc}"))
            took[bench] = time.perf_counter() - started
            print(f"{took[bench]:.0f} s", flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    meta["seconds"] = took
    meta["load_after"] = os.getloadavg()
    print()
    print(table(rows))
    print(f"\ntotal {sum(took.values()):.0f} s; load average after {meta['load_after'][0]:.1f}")
    if args.json:
        write_json(args.json, rows, meta)
    if args.markdown:
        write_markdown(args.markdown, rows, meta)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
