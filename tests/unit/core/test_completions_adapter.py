"""The legacy completions parser and chunk renderer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lmsp_desktop.core.api.completions.render import CompletionChunks
from lmsp_desktop.core.api.completions.request import choice_bodies, parse_completion
from lmsp_desktop.core.errors import LmspError


def parse(**fields: Any) -> dict[str, Any]:
    return parse_completion({"model": "m", "prompt": "Hi", **fields}, "fail")


def test_a_prompt_is_kept_as_text_without_chat_messages() -> None:
    request = parse(suffix="end", stop="\n", echo=True, seed=3)
    assert (request["prompt"], request["suffix"], request["messages"]) == ("Hi", "end", [])
    assert request["stop"] == ["\n"] and request["seed"] == 3 and request["echo"] is True
    assert request["max_output_tokens"] == 16  # OpenAI's default for this API
    assert parse(prompt=["One"])["prompt"] == "One"


def test_a_prompt_of_token_ids_is_kept_as_ids() -> None:
    """As OpenAI takes them: an array of token ids, or a list holding one."""
    assert parse(prompt=[1, 2, 3])["prompt"] == [1, 2, 3]
    assert parse(prompt=[[7, 8]])["prompt"] == [7, 8]


@pytest.mark.parametrize("prompt", [["a", "b"], [[1, 2], [3]], ["a", [1]]])
def test_several_prompts_are_one_body_per_choice(prompt: list[Any]) -> None:
    """As OpenAI answers them: one choice per prompt times n, in index order (prompt × n +
    j), each body one prompt and no `n` (each a task, choices.py); a seed moves on by j."""
    bodies = choice_bodies({"model": "m", "prompt": prompt, "n": 2, "seed": 7})
    assert bodies is not None
    assert [b["prompt"] for b in bodies] == [p for p in prompt for _ in (0, 1)]
    assert [b["seed"] for b in bodies] == [7, 8, 7, 8]
    assert all("n" not in b and parse(**b)["prompt"] == b["prompt"] for b in bodies)


def test_one_choice_is_answered_as_its_body_stands() -> None:
    for prompt in ("a", [1, 2], ["a"], [[1, 2]], None, []):
        assert choice_bodies({"model": "m", "prompt": prompt}) is None
    assert choice_bodies({"model": "m", "prompt": "a", "n": 3}) is not None


def test_more_choices_than_the_bound_are_refused() -> None:
    with pytest.raises(LmspError) as refused:
        choice_bodies({"model": "m", "prompt": ["a"] * 65, "n": 2})
    assert refused.value.status == 400 and "130 choices" in refused.value.message


@pytest.mark.parametrize("fields", [{"echo": True}, {"suffix": "end"}])
def test_echo_and_suffix_need_a_text_prompt(fields: dict[str, Any]) -> None:
    with pytest.raises(LmspError) as refused:
        parse(prompt=[1, 2], **fields)
    assert refused.value.param == next(iter(fields)) and "as text" in refused.value.message


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": [[]]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": None}, "prompt"),
        ({"logprobs": 1}, "logprobs"),
        ({"n": 2}, "n"),
        ({"best_of": 3}, "best_of"),
        ({"suffix": 5}, "suffix"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_bad_fields_are_refused_naming_them(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(LmspError) as refused:
        parse(**fields)
    assert refused.value.status == 400 and refused.value.param == param


def test_chunks_echo_the_prompt_then_stream_text_then_done() -> None:
    request = parse(echo=True, stream=True, stream_options={"include_usage": True})
    chunks = CompletionChunks({"id": "cmpl-1", "created_at": 1, "model": "m"}, request)
    done = {"usage": {"input_tokens": 2, "output_tokens": 1}}
    raw = chunks.opening() + b"".join(
        chunks.render(e)
        for e in [
            {"type": "response.output_text.delta", "delta": ' "there"'},
            {"type": "response.completed", "response": done},
        ]
    )
    lines = raw.decode().strip().split("\n\n")
    assert lines[-1] == "data: [DONE]" and chunks.finished
    payloads = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert [p["choices"][0]["text"] for p in payloads[:2]] == ["Hi", ' "there"']
    assert payloads[2]["choices"][0]["finish_reason"] == "stop"
    assert payloads[3]["usage"] == {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}
