"""Tools and tool turns in the prompt: the template's own way, else the generic prompt."""

from __future__ import annotations

from lmsp_desktop.core.engines.llama_chat import FALLBACK_TEMPLATE, ChatRenderer, chat_environment
from lmsp_desktop.core.tools.plan import plan_output
from lmsp_desktop.core.tools.prompt import template_takes_tools

TOOL = {
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}
TURNS = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'}
        ],
    },
    {"role": "tool", "call_id": "call_1", "content": "sunny"},
]
# A Hermes/Qwen-style template that takes tools (shortened).
HERMES = (
    "{% if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}"
    "</tools> Use <tool_call></tool_call>.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n{{ c.function | tojson }}\n"
    "</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "<|im_start|>assistant\n"
)


# The same, with Transformers' template tags: `{% generation %}` (the assistant mask) and
# the loop controls `{% break %}` / `{% continue %}`, which a plain Jinja environment cannot
# parse.
HERMES_TAGGED = (
    "{% if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}"
    "</tools> Use <tool_call></tool_call>.<|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
    "{% if loop.index > 20 %}{% break %}{% endif %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' %}{% generation %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n{{ c.function | tojson }}\n"
    "</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}"
    "{% endgeneration %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "<|im_start|>assistant\n"
)


def test_template_detection() -> None:
    environment = chat_environment()
    assert not template_takes_tools(FALLBACK_TEMPLATE, environment)
    assert template_takes_tools(HERMES, environment)
    assert template_takes_tools(HERMES_TAGGED, environment)
    assert not template_takes_tools("{% if tools %}[AVAILABLE_TOOLS]{% endif %}", environment)


def test_a_template_with_transformers_tags_gets_the_tools_itself() -> None:
    renderer = ChatRenderer(HERMES_TAGGED, bos_token="", eos_token="<|im_end|>")
    prompt = renderer.render([{"role": "system", "content": "Be brief."}, *TURNS], [TOOL])
    assert "You can call functions" not in prompt  # not the generic prompt
    assert '<tools>{"type": "function", "function": {"name": "get_weather"' in prompt
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}\n</tool_call><|im_end|>' in prompt
    )  # the call as the template writes it, inside its {% generation %} block
    assert "Be brief." not in prompt  # the template's {% continue %} skipped it


def test_generic_prompt_lists_tools_and_replays_tool_turns() -> None:
    renderer = ChatRenderer(None, bos_token="", eos_token="<|im_end|>")
    prompt = renderer.render(TURNS, [TOOL])
    assert prompt.startswith("<|im_start|>system\nYou can call functions")
    assert '{"name": "get_weather", "description": "Weather in a city"' in prompt
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", '
        '"arguments": {"city": "Paris"}}\n</tool_call><|im_end|>' in prompt
    )
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>" in prompt


def test_native_template_gets_tools_and_structured_turns() -> None:
    renderer = ChatRenderer(HERMES, bos_token="", eos_token="<|im_end|>")
    prompt = renderer.render(TURNS, [TOOL])
    assert "You can call functions" not in prompt  # the template lists them itself
    assert '<tools>{"type": "function", "function": {"name": "get_weather"' in prompt
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt


def test_plan_adds_notes_and_grammar_only_when_needed() -> None:
    base = {"tools": [TOOL], "tool_choice": "auto", "text_format": {"type": "text"}}
    loose = plan_output({**base, "tools": [{**TOOL, "strict": False}]}, TURNS[:1])
    assert loose.parse_calls and loose.messages == TURNS[:1]
    # auto: free text until the tool-call opening, then the call under the tool's schema
    assert loose.grammar and "root ::= free-text (calls)?" in loose.grammar
    assert '"\\"city\\""' in loose.grammar
    forced = plan_output({**base, "tool_choice": "required"}, TURNS[:1])
    assert forced.grammar and "call-0" in forced.grammar and "free-text" not in forced.grammar
    loose_forced = plan_output(
        {**base, "tool_choice": "required", "tools": [{**TOOL, "strict": False}]}, TURNS[:1]
    )
    assert loose_forced.grammar == forced.grammar  # the schema holds whether or not strict
    assert forced.messages[0] == {
        "role": "system",
        "content": "You must call one of the functions now.",
    }
    none = plan_output({**base, "tool_choice": "none"}, TURNS[:1])
    assert none.tools is None and none.grammar is None and not none.parse_calls
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    structured = plan_output(
        {"text_format": {"type": "json_schema", "name": "A", "schema": schema, "strict": True}},
        [{"role": "system", "content": "Be brief."}, *TURNS[:1]],
    )
    assert structured.grammar and "answer-root" in structured.grammar
    assert structured.messages[0]["content"].startswith("Be brief.\n\nAnswer with a JSON object")
