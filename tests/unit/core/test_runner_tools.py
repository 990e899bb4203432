"""Tool calls through the runner with a scripted engine: `auto` output parsed into a message
and function_call items, their events, and exact resume in the middle of a call."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from lmsp_desktop.core.api.anthropic.render import stop_reason
from lmsp_desktop.core.api.chat.render import finish_reason
from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.storage.recovery import next_boot, recover
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask
from lmsp_desktop.core.tools.fields import parse_tool_fields
from tests.support.lifecycle import started
from tests.support.polling import until
from tests.unit.core.test_runner import Paths, finished

SCRIPT = (
    "Let", " me", " check", ".\n", "<tool", "_call>\n", '{"name": "get_weather", ',
    '"arguments": {"city": ', '"Paris"', "}}", "\n</tool", "_call>",
)  # fmt: skip
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": False,
}


async def submit(store: Store, tools: list[Any] | None = None, **body: Any) -> str:
    request = parse_create({"model": "m", "input": "Weather in Paris?", **body}, "fail")
    offered = {"tools": tools or [WEATHER], "tool_choice": "auto"}
    request.update(parse_tool_fields(offered, "responses"))
    result = await store.tasks.create(
        NewTask(model="m", request=request, on_restart=request["on_restart"])
    )
    return result.task_id


def summary(response: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (i["type"], i.get("name"), i.get("arguments"), i["status"])
        if i["type"] == "function_call"
        else (i["type"], i["content"][0]["text"], i["status"])
        for i in response["output"]
    ]


EXPECTED = [
    ("message", "Let me check.", "completed"),
    ("function_call", "get_weather", '{"city": "Paris"}', "completed"),
]


async def test_auto_output_becomes_a_message_and_a_function_call(store: Store) -> None:
    engine = FakeEngine(SCRIPT, token_delay=0.02)  # small batches: arguments in several deltas
    async with started(Runner(store.tasks, Paths(), engine)):
        task_id = await submit(store)
        await until(lambda: finished(store, task_id))
        response = await store.tasks.response_object(task_id)
        assert response["status"] == "completed"
        assert summary(response) == EXPECTED
        assert response["output_text"] == "Let me check."
        call = response["output"][1]
        assert call["call_id"].startswith("call_") and call["id"].startswith("fc_")
        for item in response["output"]:  # what an item_reference to it finds
            held = await store.tasks.holding_item(item["id"], None)
            assert [row["id"] for row in held] == [task_id], item
        assert engine.requests[0].tools and engine.requests[0].tools[0]["name"] == "get_weather"
        events = await store.tasks.events(task_id)
        fc = [e for e in events if e.get("item_id") == call["id"] or
              e.get("item", {}).get("id") == call["id"]]  # fmt: skip
        assert fc[0]["type"] == "response.output_item.added"
        assert fc[0]["item"]["status"] == "in_progress" and fc[0]["output_index"] == 1
        assert [e["type"] for e in fc][-2:] == [
            "response.function_call_arguments.done",
            "response.output_item.done",
        ]
        deltas = [e["delta"] for e in fc if e["type"] == "response.function_call_arguments.delta"]
        assert len(deltas) >= 2 and "".join(deltas) == '{"city": "Paris"}'  # streamed
        assert all("<tool_call>" not in e.get("delta", "") for e in events)
        assert events[-1]["type"] == "response.completed"
        assert summary(events[-1]["response"]) == EXPECTED


async def test_a_call_still_being_written_is_not_found_by_reference(store: Store) -> None:
    engine = FakeEngine(SCRIPT)
    engine.gate = threading.Semaphore(0)
    async with started(Runner(store.tasks, Paths(), engine)):
        task_id = await submit(store)
        engine.gate.release(8)  # the call opened, its arguments half written

        async def call_open() -> str | None:
            response = await store.tasks.response_object(task_id)
            calls = [i for i in response["output"] if i["type"] == "function_call"]
            return calls[0]["id"] if calls else None

        await until(call_open)
        call_id = await call_open()
        assert call_id is not None
        # An item_reference to it now would read half its arguments as the whole call.
        assert await store.tasks.holding_item(call_id, None) == []
        engine.gate.release(100)
        await until(lambda: finished(store, task_id))
        held = await store.tasks.holding_item(call_id, None)
        assert [row["id"] for row in held] == [task_id]


async def test_resume_in_the_middle_of_a_call_is_exact(data_dir: Path) -> None:
    for cut in (2, 6, 8, 10):
        await _interrupt_and_resume(data_dir / str(cut), cut)


async def _interrupt_and_resume(where: Path, cut: int) -> None:
    """Run SCRIPT, stop after `cut` tokens as a crash would, recover with `resume`, finish."""
    store = Store(where)
    await store.open()
    engine = FakeEngine(SCRIPT)
    engine.gate = threading.Semaphore(0)
    async with started(Runner(store.tasks, Paths(), engine)):
        task_id = await submit(store, on_restart="resume")
        engine.gate.release(cut)

        async def reached() -> bool:
            return int((await store.tasks.get(task_id))["output_tokens"]) >= cut

        await until(reached)
    # Leaving the block stopped the runner: a shutdown leaves the task running, like a crash.
    await store.close()

    store = Store(where)
    await store.open()
    await recover(store.tasks, await next_boot(store.tasks))
    try:
        async with started(Runner(store.tasks, Paths(), FakeEngine(SCRIPT))):
            await until(lambda: finished(store, task_id))
            response = await store.tasks.response_object(task_id)
            assert summary(response) == EXPECTED, f"cut at {cut}"
            events = await store.tasks.events(task_id)
            args = "".join(
                e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
            )
            assert args == '{"city": "Paris"}', f"cut at {cut}"  # nothing repeated or skipped
            added = [e for e in events if e["type"] == "response.output_item.added"]
            assert len(added) == 2  # each item opened once
            assert json.loads(response["output"][1]["arguments"]) == {"city": "Paris"}
    finally:
        await store.close()


async def test_calls_past_the_limit_are_dropped_without_a_grammar(store: Store) -> None:
    async with started(Runner(store.tasks, Paths(), FakeEngine((*SCRIPT, "\n", *SCRIPT[4:])))):
        task_id = await submit(store)  # parallel_tool_calls defaults to false
        await until(lambda: finished(store, task_id))
        response = await store.tasks.response_object(task_id)
        assert summary(response) == EXPECTED  # the second, repeated call is not kept


async def test_a_call_of_a_namespaced_function_names_its_namespace(store: Store) -> None:
    async with started(Runner(store.tasks, Paths(), FakeEngine(SCRIPT))):
        namespace = {"type": "namespace", "name": "weather_mcp", "tools": [WEATHER]}
        task_id = await submit(store, tools=[namespace])
        await until(lambda: finished(store, task_id))
        response = await store.tasks.response_object(task_id)
        call = response["output"][1]
        assert (call["name"], call["namespace"]) == ("get_weather", "weather_mcp")
        events = await store.tasks.events(task_id)
        added = [e for e in events if e["type"] == "response.output_item.added"]
        assert added[1]["item"]["namespace"] == "weather_mcp"


# A forced call as the grammar writes it, four tokens; the budget may end it at any of them.
FORCED = (
    "<tool_call>\n",
    '{"name": "get_weather", "arguments": ',
    '{"city": "Paris"}',
    "}\n</tool_call>",
)


async def test_a_forced_call_complete_at_the_token_budget_is_a_tool_call(store: Store) -> None:
    """The budget ends the output exactly as the call's JSON is complete (with or without the
    closing tag): the client gets a tool call to run (chat `tool_calls`, Anthropic
    `tool_use`), not an answer cut by the limit; a budget that cuts the arguments is one."""
    async with started(Runner(store.tasks, Paths(), FakeEngine(FORCED))):
        for budget, status, chat, anthropic in (
            (4, "completed", "tool_calls", "tool_use"),  # the call's last token is the last
            (3, "completed", "tool_calls", "tool_use"),  # arguments complete, tag to come
            (2, "incomplete", "length", "max_tokens"),  # the arguments not begun
        ):
            request = parse_create(
                {"model": "m", "input": "Weather in Paris?", "max_output_tokens": budget}, "fail"
            )
            request.update(
                parse_tool_fields({"tools": [WEATHER], "tool_choice": "required"}, "responses")
            )
            created = await store.tasks.create(NewTask(model="m", request=request))
            task_id = created.task_id
            await until(lambda t=task_id: finished(store, t))
            response = await store.tasks.response_object(task_id)
            (call,) = response["output"]
            assert (response["status"], call["status"]) == (status, status), budget
            assert (finish_reason(response), stop_reason(response)) == (chat, anthropic), budget
            if status == "completed":
                assert json.loads(call["arguments"]) == {"city": "Paris"}
