"""A real `serve` process, SIGKILLed twice while the task it runs shares every decode with
other generating tasks, resumes it to byte-identical output (real demo model, a seed): its
prompt, longer than one decode, read in other chunks than in its uninterrupted run, and its
tokens replayed beside the neighbours' tokens. (Split from test_resume_after_kill.py, so that
two test workers share the two halves.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.serve_process import ServeProcess, call, create_token
from tests.support.resume import SERVE_FLAGS, kill_at, reference_text, set_settings, wait_finished

# A bound on a hang, not on speed: every kill costs a `serve` start, a model load and the
# exactness probe, which at load 18 on two cores (other work beside the suite) took over a
# minute each, and 7-neighbours ran past the suite's 300 s.
pytestmark = pytest.mark.timeout(900)

MODEL = "smollm2-135m-instruct"

# A prompt longer than one decode (512 tokens; 534 with the chat template): read in large
# chunks on every core when alone, in 128-token chunks (llama_batch.SHARED_CHUNK) between the
# neighbours' tokens when they generate. The prompt is read four times (the reference, the
# run, after each kill): no longer than that.
LONG_PROMPT = (
    " ".join(f"Note {i}: the lamp at mile {i * 7 % 13} burned until dawn." for i in range(33))
    + " Now write a short story about the keeper who lit these lamps."
)
ONE_DECODE = 512
# Two kills among the neighbours, each with tokens still to come (every step decodes all
# eight sequences: no more tokens than the kills need): the first once 6 tokens are out, the
# second once the resumed run has made 2 of its own. A fixed second cut (24 of 40) left 16
# tokens between the poll that sees it and the end: on a busy machine the service, starved
# while the worker decoded, committed them in one group with the finish, and the task ended
# before the kill (suite at load 4, 26b5368's finish with the last deltas).
NEIGHBOUR_KILLS = 2
FIRST_CUT = 6
NEW_TOKENS_BEFORE_NEXT_CUT = 2
NEIGHBOUR_MAX_TOKENS = 40


@pytest.mark.parametrize(
    ("neighbours", "settings"),
    [
        # One context of two sequences (two threads each): the neighbour shares every decode.
        (1, {"engine_threads": 2, "parallel_per_model": 2}),
        # The default: two contexts of two sequences.
        (3, {}),
        # Two contexts of four sequences: every sequence busy.
        (7, {"parallel_per_model": 8}),
    ],
    ids=["1-neighbour", "3-neighbours", "7-neighbours"],
)
def test_resume_is_exact_while_other_tasks_share_the_decodes(
    tmp_path: Path,
    neighbours: int,
    settings: dict,  # type: ignore[type-arg]
) -> None:
    """The reference runs alone; the killed task, its prompt longer than one decode, runs
    and resumes beside generating tasks, and still ends byte-identical."""
    data_dir = tmp_path / "data"
    token = create_token(data_dir)  # which creates the database, so settings can be stored
    set_settings(data_dir, **settings)
    server = ServeProcess(data_dir, *SERVE_FLAGS)
    url = server.start()
    try:
        _resume_among_neighbours(server, url, token, neighbours)
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()  # never leave a server generating after a failure


def _resume_among_neighbours(server: ServeProcess, url: str, token: str, count: int) -> None:
    body = {"model": MODEL, "input": LONG_PROMPT, "max_output_tokens": NEIGHBOUR_MAX_TOKENS}
    body.update(seed=77, temperature=0.7)
    expected = reference_text(url, token, body)
    background = {"background": True, "on_restart": "resume"}
    status, created = call(f"{url}/v1/responses", token, "POST", {**body, **background})
    assert status == 202, created
    task_id = created["id"]
    neighbours = []
    topics = ("volcanoes", "the moon", "bread", "rivers", "glass", "bees", "trains")
    for topic in topics[:count]:
        other = {"model": MODEL, "input": f"Write a long essay about {topic}.", **background}
        other.update(temperature=0, max_output_tokens=600)
        status, made = call(f"{url}/v1/responses", token, "POST", other)
        assert status == 202, made
        neighbours.append(made["id"])
    cuts = (FIRST_CUT,) + (NEW_TOKENS_BEFORE_NEXT_CUT,) * (NEIGHBOUR_KILLS - 1)
    url, kills = kill_at(server, token, task_id, cuts, relative=True)
    assert kills == NEIGHBOUR_KILLS, "the generation ended before the kills could happen"
    wait_finished(url, token, task_id)
    status, response = call(f"{url}/v1/responses/{task_id}", token)
    assert response["output_text"] == expected
    assert response["usage"]["input_tokens"] > ONE_DECODE
    for other_id in neighbours:  # they really were generating alongside
        status, other_task = call(f"{url}/v1/tasks/{other_id}", token)
        assert other_task["output_tokens"] > 0, json.dumps(other_task)
        call(f"{url}/v1/responses/{other_id}/cancel", token, "POST", {})
    assert server.terminate() == 0
