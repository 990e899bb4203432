"""Smoke run of every benchmark at tiny sizes: each produces sane figures (never timed).

A smoke run only shows that the bench code runs, so the benches that drive the demo model run
it cut to 4 of its 30 blocks here (tests/support/cut_model.py: the same GGUF, tokenizer and
kernels, ~5x less CPU a token); `make bench` runs the demo model itself, whose figures are
the product's. B12 too: at the smoke's budget (32 tokens) each of its runs, free, under the
schema grammar (a story of at least 2,000 characters) and under the auto tool-choice grammar,
decodes all 32 tokens on the demo model and on the cut model alike."""

from __future__ import annotations

import importlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import bench.common
import bench.llm
from bench.__main__ import BENCHES
from bench.common import BenchServer
from bench.report import Row
from tests.support.built_once import built_once
from tests.support.cut_model import NAME as CUT_MODEL
from tests.support.cut_model import cut_demo_model

ROOT = Path(__file__).resolve().parents[2]
# Rows whose figure may legitimately be zero (bytes hashed on a rescan: zero is the goal).
ZERO_OK = {"bytes"}
# The benches that drive the demo model.
ON_THE_CUT_MODEL = {f"B{n}" for n in (3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)}
# `python -m bench.NAME ARGS` run with NAME as the first argument, its demo model being the cut
# model named by LMSP_SMOKE_CUT_MODEL: the module runs as __main__ after
# bench.common.demo_model is replaced, so its `from bench.common import demo_model` (or
# bench.llm's) gets the cut model.
BENCH_MODULE_ON_THE_CUT_MODEL = """
import os, runpy, sys
from pathlib import Path
import bench.common
bench.common.demo_model = lambda: Path(os.environ["LMSP_SMOKE_CUT_MODEL"])
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
"""


def check_rows(bench: str, rows: list[Row]) -> None:
    assert rows, f"{bench} produced no rows"
    for row in rows:
        assert row.bench == bench
        assert row.measure != "crashed", row.note
        assert row.figure is not None and math.isfinite(row.figure), row
        assert row.figure > 0 or (row.unit in ZERO_OK and row.figure == 0), row
        if row.ratio is not None:
            assert math.isfinite(row.ratio) and row.ratio > 0, row
        if row.goal:
            assert row.passed in (True, False), row


@pytest.mark.parametrize("bench", [b for b in BENCHES if b != "B6"])
def test_benchmark_runs_at_tiny_size(
    bench: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = importlib.import_module(BENCHES[bench])
    if bench in ON_THE_CUT_MODEL:
        on_the_cut_model(monkeypatch, module)
    rows = module.run(tmp_path, quick=True)
    check_rows(bench, rows)


def on_the_cut_model(monkeypatch: pytest.MonkeyPatch, module: object) -> None:
    """The bench's demo model (its file, its id, the `serve` it starts, the fresh
    `python -m bench.NAME` processes its peers run in) is the cut model."""
    cut = cut_demo_model()

    run = subprocess.run

    def run_bench_module_on_the_cut_model(command: Any, *args: Any, **kwargs: Any) -> Any:
        """Benches run some peers in a fresh `python -m bench.NAME` (B3's in-process
        baselines, B16's Llama.eval), where this process's patches do not reach: those ran
        the demo model, each with its load, exactness probe and warm-up. That process is
        told the cut model instead; any other command runs as it is."""
        if (
            isinstance(command, list)
            and command[:2] == [sys.executable, "-m"]
            and str(command[2]).startswith("bench.")
        ):
            command = [sys.executable, "-c", BENCH_MODULE_ON_THE_CUT_MODEL, *command[2:]]
            env = kwargs.get("env") or os.environ
            kwargs["env"] = {**env, "LMSP_SMOKE_CUT_MODEL": str(cut)}
        return run(command, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run_bench_module_on_the_cut_model)
    for holder in (module, bench.llm, bench.common):
        if hasattr(holder, "MODEL_ID"):
            monkeypatch.setattr(holder, "MODEL_ID", CUT_MODEL)
        if hasattr(holder, "demo_model"):
            monkeypatch.setattr(holder, "demo_model", lambda: cut)
    # B18's in-process peer opens the core's demo_model_path() itself (it loaded and embedded
    # with the demo model while the service beside it embedded with the cut model).
    if hasattr(module, "demo_model_path"):
        monkeypatch.setattr(module, "demo_model_path", lambda: cut)
    # B15's copy of the model declaring a 128k trained context: gguf-set-metadata parses the
    # whole file in a fresh Python (~7 % of the smoke's CPU, every run). The same recipe (the
    # bench's own function, on the cut model) built once per machine, copied where B15 wants it.
    if hasattr(module, "long_context_copy"):
        b15: Any = module
        make = b15.long_context_copy
        stat = cut.stat()
        key = f"{stat.st_size}-{stat.st_mtime_ns}-{CUT_MODEL}-b15"

        def built_long_context_copy(folder: Path) -> Path:
            built = built_once(key, "models", make, b15) / f"{b15.MODEL}.gguf"
            folder.mkdir(parents=True, exist_ok=True)
            return Path(shutil.copyfile(built, folder / built.name))

        monkeypatch.setattr(module, "long_context_copy", built_long_context_copy)
    listing = BenchServer.__init__

    def listing_the_cut_model(
        self: BenchServer, data_dir: Path, *args: str, port: int | None = None
    ) -> None:
        if "--demo" in args:
            args = (*args, "--models-dir", str(cut.parent))
        listing(self, data_dir, *args, port=port)

    monkeypatch.setattr(BenchServer, "__init__", listing_the_cut_model)


def test_cli_prints_table_and_writes_json(tmp_path: Path) -> None:
    """`python -m bench --quick --only B6 --json …`: the command make bench runs."""
    out = tmp_path / "rows.json"
    page = tmp_path / "benchmarks.md"
    page.write_text(
        "# Benchmarks\n\n<!-- bench:table -->\nold table\n<!-- /bench:table -->\n\nAfter.\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--only",
            "B6",
            "--json",
            str(out),
            "--markdown",
            str(page),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| B6 | registry sha256_file" in done.stdout
    data = json.loads(out.read_text())
    assert data["meta"]["commit"] and data["meta"]["quick"] is True
    rows = [Row(**r) for r in data["rows"]]
    check_rows("B6", rows)
    rescan = next(r for r in rows if r.measure.startswith("bytes hashed rescanning"))
    assert rescan.figure == 0 and rescan.passed is True
    # The page's one table is this run's, with its commit; the rest of the page is kept.
    written = page.read_text()
    assert "old table" not in written and "| B6 | registry sha256_file" in written
    assert f"commit `{data['meta']['commit']}`" in written
    assert written.startswith("# Benchmarks\n") and written.endswith("\n\nAfter.\n")


def test_cli_refuses_unknown_benchmark() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "B99"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "unknown benchmark B99" in done.stderr
