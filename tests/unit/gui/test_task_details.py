"""The details pane: a long finished task's Events tab opens scrolled to its very end."""

from __future__ import annotations

import json

import pytest

from lmsp_desktop.gui.pages.task_details import TaskDetails
from tests.support.polling import until
from tests.unit.gui.helpers import make_task, run_task

pytestmark = pytest.mark.gui


@pytest.fixture
async def details(qtbot, core):
    widget = TaskDetails(core)
    qtbot.addWidget(widget)
    widget.resize(900, 260)  # a short pane: the hidden Events page is taller before it shows
    widget.show()
    yield widget


def last_row_visible(widget: TaskDetails) -> bool:
    view = widget.events_view
    last = widget.events.index(widget.events.rowCount() - 1, 0)
    rect = view.visualRect(last)
    return rect.isValid() and view.viewport().rect().contains(rect)


async def test_events_tab_of_a_long_finished_task_opens_at_its_last_row(details, store):
    task_id = await make_task(store)
    await run_task(store, task_id, [f" word{i}" for i in range(1200)])
    total = len(await store.tasks.events(task_id, 0, 10_000))
    await details.show_task(task_id)  # the Output tab is in front while events load
    details.tabs.setCurrentIndex(1)
    await until(
        lambda: details.events.rowCount() == total,
        what=lambda: f"{details.events.rowCount()} of {total}",
    )
    await until(lambda: last_row_visible(details), limit=2, what="the last event in view")
    bar = details.events_view.verticalScrollBar()
    assert bar.value() == bar.maximum()


async def test_events_view_stays_where_the_reader_scrolled(details, store):
    task_id = await make_task(store)
    await run_task(store, task_id, [f" w{i}" for i in range(40)], finish=False)
    details.tabs.setCurrentIndex(1)
    await details.show_task(task_id)
    await until(lambda: last_row_visible(details), limit=2, what="the tail in view")
    bar = details.events_view.verticalScrollBar()
    bar.setValue(3)  # the reader scrolls up to read
    await store.tasks.append_deltas(
        task_id, [" more"] * 30, output_tokens=70, input_tokens=5, snapshot=None
    )
    await details.refresh()
    await until(lambda: details.events.rowCount() > 70, what="new events appended")
    assert bar.value() == 3
    bar.setValue(bar.maximum())  # back at the bottom: follows again
    await store.tasks.append_deltas(
        task_id, [" again"] * 30, output_tokens=100, input_tokens=5, snapshot=None
    )
    await details.refresh()
    await until(lambda: last_row_visible(details), limit=2, what="following the tail again")


async def test_function_calls_and_dropped_tools_are_shown(details, store):
    from lmsp_desktop.core.storage.tasks import NewTask
    from lmsp_desktop.core.tools.parser import ArgumentsDelta, CallDone, CallStarted, TextDelta

    request = {
        "input": "Weather?",
        "temperature": 0.7,
        "top_p": 0.95,
        "dropped_tools": ["web_search", "mcp:github"],
    }
    task_id = (await store.tasks.create(NewTask(model="smollm2", request=request))).task_id
    await store.tasks.mark_running(task_id, open_message=False)
    await store.tasks.append_output(
        task_id,
        [
            TextDelta("Checking."),
            CallStarted(0, "get_weather"),
            ArgumentsDelta(0, '{"city": "Paris"}'),
            CallDone(0, "get_weather", '{"city": "Paris"}'),
        ],
        output_tokens=9,
        input_tokens=5,
        snapshot=None,
    )
    await store.tasks.finish(task_id, incomplete_reason=None, input_tokens=5, output_tokens=9)
    await details.show_task(task_id)
    assert "not offered to the model" in details.header.text()
    assert "web_search, mcp:github" in details.header.text()
    assert details.output.toPlainText() == 'Checking.\n→ get_weather({"city": "Paris"})'


async def test_an_empty_output_says_why(details, store):
    queued = await make_task(store)
    await details.show_task(queued)
    assert "Waiting in the queue" in details.output.placeholderText()
    await store.tasks.cancel(queued)
    await details.refresh()
    assert "cancelled while it waited in the queue" in details.output.placeholderText()
    failed = await make_task(store)
    await store.tasks.mark_running(failed)
    await store.tasks.fail(failed, "engine_error", "The model file could not be read.")
    await details.show_task(failed)
    assert details.output.placeholderText() == (
        "No output: the task failed (engine_error). The model file could not be read."
    )
    # The reason in words on the header's second line, which is always kept: the tabs
    # below do not move from one task to the next.
    assert "The model file could not be read." in details.header.text()
    assert details.header.minimumHeight() >= 2 * details.header.fontMetrics().lineSpacing()
    assert "engine_error" in details.header.toolTip()


async def test_request_tab_shows_what_the_client_sent(details, store):
    """Parsed by the core's own request parsers, stored by the real store: the Request tab
    shows the input as sent, tool names, the format and sampling, not internal `messages`."""
    from lmsp_desktop.core.api.chat.request import parse_chat
    from lmsp_desktop.core.api.responses.request import parse_create
    from lmsp_desktop.core.storage.tasks import NewTask

    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    sent = [{"type": "message", "role": "user", "content": "Weather in Paris?"}]
    responses = parse_create(
        {
            "model": "smollm2",
            "input": sent,
            "tools": [tool],
            "temperature": 0.3,
            "max_output_tokens": 50,
            "text": {"format": {"type": "json_object"}},
        },
        "fail",
    )
    task_id = (await store.tasks.create(NewTask(model="smollm2", request=responses))).task_id
    await details.show_task(task_id)
    shown = details.request.toPlainText()
    assert "Responses (POST /v1/responses)" in shown
    assert json.dumps(responses["input_items"], indent=2) in shown
    assert "Tools: get_weather" in shown
    assert "Text format: json_object" in shown
    assert "temperature 0.3" in shown and "max_output_tokens 50" in shown
    assert '"messages"' not in shown and '"parameters"' not in shown

    chat = parse_chat(
        {
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Hi"}],
            "response_format": {"type": "json_object"},
            "seed": 7,
        },
        "fail",
    )
    chat_id = (await store.tasks.create(NewTask(model="smollm2", request=chat))).task_id
    await details.show_task(chat_id)
    shown = details.request.toPlainText()
    assert "Chat Completions (POST /v1/chat/completions)" in shown
    assert '"content": "Hi"' in shown
    assert "Response format: json_object" in shown and "seed 7" in shown


async def test_request_tab_names_the_anthropic_api_and_its_notes(details, store):
    """A task from Anthropic's API: the Request tab names the API it came through and the
    notes of what the service did not use."""
    from lmsp_desktop.core.api.anthropic.request import parse_messages_request
    from lmsp_desktop.core.storage.tasks import NewTask

    request = parse_messages_request(
        {
            "model": "smollm2",
            "max_tokens": 16,
            "system": "Be brief.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
        },
        "fail",
    )
    task_id = (await store.tasks.create(NewTask(model="smollm2", request=request))).task_id
    await details.show_task(task_id)
    shown = details.request.toPlainText()
    assert shown.startswith("Anthropic Messages (POST /v1/messages)")
    assert '"content": "Hi"' in shown and '"content": "Be brief."' in shown
    assert "Note: Extended thinking was asked for" in shown


async def test_request_tab_shows_a_prefill_and_a_dropped_keyword_as_sent(details, store):
    """An Anthropic prefill shows as the client's last assistant turn, without the engine's
    mark on it; a keyword the grammar leaves out is told once (the task's note)."""
    from lmsp_desktop.core.api.anthropic.request import parse_messages_request
    from lmsp_desktop.core.storage.tasks import NewTask

    schema = {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 0.5}}}
    request = parse_messages_request(
        {
            "model": "smollm2",
            "max_tokens": 16,
            "messages": [
                {"role": "user", "content": "Describe a cat."},
                {"role": "assistant", "content": "1. Fur color:"},
            ],
            "tools": [{"name": "pick", "input_schema": schema}],
        },
        "fail",
    )
    task_id = (await store.tasks.create(NewTask(model="smollm2", request=request))).task_id
    await details.show_task(task_id)
    shown = details.request.toPlainText()
    assert '"content": "1. Fur color:"' in shown
    assert "prefill" not in shown
    assert shown.count("multipleOf") == 1, shown
