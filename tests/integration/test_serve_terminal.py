"""What `serve` prints on its terminal while it works: its own lines, not llama.cpp's. A new
user's `make serve` showed "llama_init_from_model: model default pooling_type is [-1], but
[1] was specified" at every embedding: a llama.cpp warning that llama-cpp-python's logger
(reading ggml's levels one off) printed as an error. Warnings go to the log file now."""

from __future__ import annotations

from pathlib import Path

from tests.integration.serve_process import ServeProcess, call, create_token

DEMO = "smollm2-135m-instruct"


def test_an_embedding_and_a_response_leave_no_llama_cpp_lines_on_the_terminal(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    token = create_token(data)
    process = ServeProcess(data)
    process.start()
    try:
        status, embedded = call(
            f"{process.url}/v1/embeddings", token, "POST", {"model": DEMO, "input": "hi"}
        )
        assert status == 200, embedded
        body = {"model": DEMO, "input": "Say hi.", "max_output_tokens": 4}
        status, answered = call(f"{process.url}/v1/responses", token, "POST", body)
        assert status == 200, answered
    finally:
        process.terminate()
    printed = process.stderr()
    assert "pooling_type" not in printed and "llama_" not in printed, printed[-3000:]
    # Where it went instead: the log file, at debug level only, so not there either by
    # default; the terminal's lines are the service's own.
    foreign = [
        line for line in printed.splitlines() if not (" INFO " in line or " WARNING " in line)
    ]
    assert foreign == [], printed[-3000:]
