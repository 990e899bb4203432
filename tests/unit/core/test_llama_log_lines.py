"""llama.cpp's log lines in the engine's log: the errors of a decode the engine aborted (a
cancel during a prompt read) are kept out of the warnings; a decode that really failed is not."""

from __future__ import annotations

import logging

import pytest

from lmsp_desktop.core.engines.llama_bindings import (
    GGML_LOG_LEVEL_ERROR,
    GGML_LOG_LEVEL_WARN,
    log_line,
)

# As llama.cpp (llama-context.cpp) writes them when the abort callback stopped a decode.
ABORTED = [
    "graph_compute: ggml_backend_sched_graph_compute_async failed with error 1",
    "process_ubatch: failed to compute graph, compute status: 1",
    "llama_decode: failed to decode, ret = 2",
]
# And when a decode really failed: GGML_STATUS_FAILED (-1), ALLOC_FAILED (-2); ret -3/-2.
FAILED = [
    "graph_compute: ggml_backend_sched_graph_compute_async failed with error -1",
    "process_ubatch: failed to compute graph, compute status: -2",
    "llama_decode: failed to decode, ret = -3",
    "llama_decode: failed to decode, ret = 21",
]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_aborted_decode_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "lmsp_desktop.core.engines.llama_bindings")
    for line in ABORTED:
        log_line(GGML_LOG_LEVEL_ERROR, line)
    assert warnings(caplog) == []
    assert len(caplog.records) == len(ABORTED)  # kept at debug, for the log file


def test_a_real_decode_failure_still_warns(caplog: pytest.LogCaptureFixture) -> None:
    for line in FAILED:
        log_line(GGML_LOG_LEVEL_ERROR, line)
    log_line(GGML_LOG_LEVEL_WARN, "a warning stays at debug")
    assert warnings(caplog) == [f"llama.cpp: {line}" for line in FAILED]
