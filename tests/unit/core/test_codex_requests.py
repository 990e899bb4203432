"""What Codex CLI 0.171.0 really sent (tests/support/codex/) maps to the normalised request:
its function tools offered, the hosted web_search noted as dropped, its developer messages
kept, and after a tool call the call and its output as the tool turn the model sees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lmsp_desktop.core.api.responses.request import parse_create

CODEX = Path(__file__).parents[2] / "support" / "codex"
FUNCTIONS = ["exec_command", "write_stdin", "request_user_input", "view_image"]


def parsed(name: str) -> dict[str, Any]:
    return parse_create(json.loads((CODEX / name).read_text()), "fail")


def test_codex_first_turn() -> None:
    request = parsed("first_turn.json")
    assert [t["name"] for t in request["tools"]] == FUNCTIONS
    assert request["dropped_tools"] == ["web_search"]
    assert (request["tool_choice"], request["stream"], request["store"]) == ("auto", True, False)
    assert [m["role"] for m in request["messages"]] == ["developer", "developer", "user", "user"]
    assert request["messages"][0]["content"].startswith("You are a coding agent")


def test_codex_turn_after_a_tool_call() -> None:
    request = parsed("after_tool_call.json")
    *_, call, result = request["messages"]
    assert call == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "call_id": "call_64669f9664b8b73e3ae8475f",
                "name": "exec_command",
                "arguments": '{"cmd": "ls"}',
            }
        ],
    }
    assert result["role"] == "tool" and result["call_id"] == "call_64669f9664b8b73e3ae8475f"
    assert result["content"].endswith("Output:\nnotes.txt\n")
