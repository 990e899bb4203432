"""The tools and output-format fields of both APIs, normalised to the shared request keys.

Responses: `tools` (function tools; a `namespace` offers its functions; tool types the service
cannot run are dropped and named in `dropped_tools`), `tool_choice` (none, auto, required, a
named function, `allowed_tools`), `parallel_tool_calls`, `max_tool_calls`, `text.format`.
Chat Completions: `tools` (`{"type": "function", "function": {...}}`), `tool_choice`,
`parallel_tool_calls`, `response_format`. Schemas that will be compiled into a grammar are
checked here, so a keyword the grammar cannot enforce answers 400 before a task exists.
"""

from __future__ import annotations

import re
from typing import Any

from lmsp_desktop.core.errors import LmspError, invalid
from lmsp_desktop.core.tools.schema import check, enforceable

RESPONSES = "responses"
CHAT = "chat.completions"
TEXT_FORMAT = {"type": "text"}
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
CHOICES = ("none", "auto", "required")


def _unsupported(message: str, param: str) -> LmspError:
    return LmspError(message, code="unsupported_parameter", param=param, status=400)


def parse_tool_fields(body: dict[str, Any], api: str) -> dict[str, Any]:
    """`tools`, `tool_choice`, `allowed_tools`, `parallel_tool_calls`, `max_tool_calls`,
    `dropped_tools` and `text_format` for a request body of `api` ("responses" or
    "chat.completions")."""
    if api == CHAT and (body.get("functions") or body.get("function_call")):
        name = "functions" if body.get("functions") else "function_call"
        raise _unsupported(
            f"`{name}` is the retired form of tools; send `tools` and `tool_choice`.", name
        )
    notes: list[str] = []
    tools, dropped = _tools(body.get("tools"), api, notes)
    tool_choice, allowed = _tool_choice(body.get("tool_choice"), api, tools)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise invalid("`parallel_tool_calls` must be true or false.", "parallel_tool_calls")
    max_calls = body.get("max_tool_calls")
    if isinstance(max_calls, float) and max_calls.is_integer():
        max_calls = int(max_calls)
    if max_calls is not None and (
        isinstance(max_calls, bool) or not isinstance(max_calls, int) or not 0 <= max_calls <= 128
    ):
        raise invalid("`max_tool_calls` must be a whole number from 0 to 128.", "max_tool_calls")
    return {
        "tools": tools,
        "tool_choice": tool_choice,
        "allowed_tools": allowed,
        # Off unless asked for, as in llama.cpp's server: small models given the choice
        # repeat the same call until the token limit. The response echoes the value used.
        "parallel_tool_calls": False if parallel is None else parallel,
        "max_tool_calls": max_calls,
        "dropped_tools": dropped,
        "text_format": _text_format(body, api, notes),
        # Keywords of non-strict schemas that the output grammar does not enforce.
        "schema_notes": notes,
    }


# -- tools -----------------------------------------------------------------------------------
def _tools(value: Any, api: str, notes: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    if value is None:
        return [], []
    if not isinstance(value, list):
        raise invalid("`tools` must be a list of tools.", "tools")
    tools: list[dict[str, Any]] = []
    dropped: list[str] = []
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise invalid(f"{where} must be an object with a `type`.", f"{where}.type")
        kind = tool["type"]
        if kind == "function":
            tools.append(_function(tool, where, api, notes))
        elif kind == "namespace" and api == RESPONSES:
            # A group of functions (Codex sends its MCP tools this way): offer each one.
            members = tool.get("tools", tool.get("functions"))
            if not isinstance(members, list):
                raise invalid(f"{where}.tools must be a list of function tools.", f"{where}.tools")
            namespace = tool.get("name")
            for j, member in enumerate(members):
                at = f"{where}.tools[{j}]"
                if isinstance(member, dict) and member.get("type", "function") == "function":
                    offered = _function(member, at, api, notes)
                    if isinstance(namespace, str) and namespace:
                        offered["namespace"] = namespace
                    tools.append(offered)
                else:
                    dropped.append(_tool_label(member))
        elif api == CHAT:
            raise _unsupported(
                f"{where} has type {kind!r}; Chat Completions takes function tools only.",
                f"{where}.type",
            )
        else:
            # web_search, file_search, computer_use, mcp, code_interpreter, custom, …: the
            # service cannot run them, so they are not offered; the task notes them.
            dropped.append(_tool_label(tool))
    names = [t["name"] for t in tools]
    for name in names:
        if names.count(name) > 1:
            raise invalid(f"Two tools are named {name!r}; tool names must be unique.", "tools")
    return tools, dropped


def _tool_label(tool: Any) -> str:
    if not isinstance(tool, dict):
        return "unknown"
    kind = str(tool.get("type", "unknown"))
    label = tool.get("server_label") or tool.get("name")
    return f"{kind}:{label}" if isinstance(label, str) and label else kind


def _function(tool: dict[str, Any], where: str, api: str, notes: list[str]) -> dict[str, Any]:
    spec = tool
    if api == CHAT:
        spec = tool.get("function")  # type: ignore[assignment]
        where = f"{where}.function"
        if not isinstance(spec, dict):
            raise invalid(f"{where} must be an object with the function's `name`.", where)
    name = spec.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise invalid(
            f"{where}.name must be 1-64 letters, digits, underscores or dashes.", f"{where}.name"
        )
    description = spec.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid(f"{where}.description must be a string.", f"{where}.description")
    parameters = spec.get("parameters")
    if parameters is None:
        parameters = dict(EMPTY_PARAMETERS)
    if not isinstance(parameters, dict):
        raise invalid(f"{where}.parameters must be a JSON Schema object.", f"{where}.parameters")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid(f"{where}.strict must be true or false.", f"{where}.strict")
    if strict is None:
        # OpenAI's defaults: strict on the Responses API, not on Chat Completions.
        strict = api == RESPONSES
    check_schema(parameters, f"{where}.parameters", strict, notes)
    return {"name": name, "description": description, "parameters": parameters, "strict": strict}


def check_schema(schema: Any, path: str, strict: bool, notes: list[str]) -> None:
    """A strict schema with a keyword the grammar cannot enforce answers 400; a non-strict
    one is generated without that keyword, which `notes` names."""
    if strict:
        check(schema, path)
    else:
        notes.extend(enforceable(schema, path)[1])


# -- tool_choice -----------------------------------------------------------------------------
def _tool_choice(
    value: Any, api: str, tools: list[dict[str, Any]]
) -> tuple[str | dict[str, Any], list[str] | None]:
    names = [t["name"] for t in tools]
    if value is None:
        return "auto", None
    if isinstance(value, str):
        if value not in CHOICES:
            raise invalid(
                "`tool_choice` must be none, auto, required or a function.", "tool_choice"
            )
        if value == "required" and not tools:
            raise invalid("`tool_choice` is required but no function tools were sent.", "tools")
        return value, None
    if not isinstance(value, dict):
        raise invalid("`tool_choice` must be a string or an object.", "tool_choice")
    kind = value.get("type")
    if kind == "function":
        name = value.get("name")
        if api == CHAT and isinstance(value.get("function"), dict):
            name = value["function"].get("name")
        if name not in names:
            raise invalid(
                f"`tool_choice` names the function {name!r}, which is not among `tools`.",
                "tool_choice",
            )
        return {"type": "function", "name": name}, None
    if kind == "allowed_tools":
        spec = value.get("allowed_tools", value) if api == CHAT else value
        mode = spec.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise invalid("`tool_choice.mode` must be auto or required.", "tool_choice.mode")
        allowed: list[str] = []
        for j, entry in enumerate(spec.get("tools") or []):
            entry_name = entry.get("name") if isinstance(entry, dict) else None
            if isinstance(entry, dict) and isinstance(entry.get("function"), dict):
                entry_name = entry["function"].get("name")
            if not isinstance(entry_name, str) or entry_name not in names:
                raise invalid(
                    f"`tool_choice.tools[{j}]` names {entry_name!r}, which is not among `tools`.",
                    f"tool_choice.tools[{j}]",
                )
            allowed.append(entry_name)
        if not allowed:
            raise invalid("`tool_choice.tools` must name at least one function.", "tool_choice")
        return mode, allowed
    raise _unsupported(
        f"`tool_choice` of type {kind!r} names a tool this service cannot run; "
        "use none, auto, required or a function.",
        "tool_choice",
    )


# -- output format ---------------------------------------------------------------------------
def _text_format(body: dict[str, Any], api: str, notes: list[str]) -> dict[str, Any]:
    if api == CHAT:
        fmt = body.get("response_format")
        param = "response_format"
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, dict):
                raise invalid(
                    "`response_format.json_schema` must be an object with `name` and `schema`.",
                    "response_format.json_schema",
                )
            fmt = {"type": "json_schema", **spec}
            param = "response_format.json_schema"
    else:
        text = body.get("text")
        if text is not None and not isinstance(text, dict):
            raise invalid("`text` must be an object.", "text")
        fmt = (text or {}).get("format")
        param = "text.format"
    if fmt is None:
        return dict(TEXT_FORMAT)
    if not isinstance(fmt, dict):
        raise invalid(f"`{param}` must be an object with a `type`.", param)
    kind = fmt.get("type")
    if kind == "json_object" and fmt.get("schema") is not None:
        # llama-server's extension, which instructor's JSON_SCHEMA mode sends: a schema with
        # json_object is followed as a non-strict json_schema's (it was ignored, silently).
        fmt = {"type": "json_schema", "name": "response", "schema": fmt["schema"]}
        kind = "json_schema"  # its errors still name `param.schema`, where it was sent
    elif kind in ("text", "json_object"):
        return {"type": kind}
    if kind != "json_schema":
        raise invalid(f"`{param}.type` must be text, json_object or json_schema.", f"{param}.type")
    name = fmt.get("name", "response")
    if not isinstance(name, str) or not NAME.match(name):
        raise invalid(
            f"`{param}.name` must be 1-64 letters, digits, underscores or dashes.", f"{param}.name"
        )
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise invalid(f"`{param}.schema` must be a JSON Schema object.", f"{param}.schema")
    strict = fmt.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid(f"`{param}.strict` must be true or false.", f"{param}.strict")
    description = fmt.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid(f"`{param}.description` must be a string.", f"{param}.description")
    check_schema(schema, f"{param}.schema", bool(strict), notes)
    return {
        "type": "json_schema",
        "name": name,
        "description": description,
        "schema": schema,
        "strict": bool(strict),
    }
