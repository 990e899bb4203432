"""The OpenAPI 3.1 document of what this service implements (served at /v1/openapi.json)."""

from __future__ import annotations

from typing import Any

from lmsp_desktop import __version__

ERROR = {"$ref": "#/components/schemas/Error"}
NAME = {"type": "string", "minLength": 1, "pattern": "\\S"}  # not blank
_SCOPE = "(models:read|responses:read|responses:write|admin)"
SCOPES = {  # a list of scope names, or one string of them separated by spaces or commas
    "oneOf": [
        {
            "type": "array",
            "minItems": 1,
            "items": {"enum": ["models:read", "responses:read", "responses:write", "admin"]},
        },
        {"type": "string", "pattern": f"^[ ,]*{_SCOPE}([ ,]+{_SCOPE})*[ ,]*$"},
    ]
}
_STATE = "(queued|loading|running|cancelling|completed|incomplete|failed|cancelled)"
STATE_LIST = f"^{_STATE}(,{_STATE})*$"  # `state` takes one state or a comma-separated list


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): _json(ERROR, "error") for c in codes}


def _op(summary: str, scope: str | None, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": responses, **extra}
    if scope is None:
        op["security"] = []
    else:
        op["description"] = f"Needs scope `{scope}`."
    return op


def api_operation(
    summary: str,
    scope: str,
    ok: str,
    error: dict[str, Any] = ERROR,
    idempotent: bool = True,
) -> dict[str, Any]:
    """One POST operation of an API folder's route (core/api/*/routes.py OPENAPI_PATHS): a
    JSON object body, its 200 answer and its errors (in the API's own `error` shape)."""
    errors = {str(c): _json(error, "error") for c in (400, 401, 403, 404, 409, 413, 500, 503)}
    return _op(
        summary,
        scope,
        {"200": _json({"type": "object"}, ok), **errors},
        requestBody={"required": True, "content": {"application/json": {"schema": OBJ}}},
        parameters=[IDEMPOTENCY_KEY] if idempotent else [],
    )


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


# Named exactly as in the route table, so the document and the router can be compared.
ID = _path_param("id")
PAIRING_ID = _path_param("pairing_id")
CLIENT_ID = _path_param("client_id")
OBJ = {"type": "object"}
LIST = {
    "type": "object",
    "required": ["object", "data", "has_more"],
    "properties": {
        "object": {"const": "list"},
        "data": {"type": "array"},
        "has_more": {"type": "boolean"},
    },
}
_COUNT = {"type": "integer", "minimum": 0}
TASK = {  # the LMSP task object (core/api/resource.py's task_object; docs/clients.md)
    "type": "object",
    "required": ["id", "object", "state", "model", "created_at", "input_tokens", "output_tokens"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "task"},
        "state": {"type": "string", "pattern": f"^{_STATE}$"},
        "model": {"type": "string"},
        "created_at": {"type": "integer"},
        "input_tokens": {
            **_COUNT,
            "description": "The prompt's tokens: known as soon as the engine has read its "
            "length (before the first output token, also while it waits behind another "
            "prompt's read), kept when the task ends before its output; 0 before that",
        },
        "output_tokens": _COUNT,
        "prompt_progress": {
            "type": "object",
            "description": "Only while a running task's prompt waits to be read or is being "
            "read (before its first output token): the prompt's tokens, those taken from the "
            "prefix cache, and those read so far, cached ones included",
            "required": ["total", "cached", "processed", "waiting"],
            "properties": {
                "total": _COUNT,
                "cached": _COUNT,
                "processed": _COUNT,
                "waiting": {
                    "type": "boolean",
                    "description": "True until its own read begins: it waits behind another "
                    "task's prompt read (processed == cached meanwhile)",
                },
            },
        },
        "download_progress": {
            "type": "object",
            "description": "Only for a download (kind `download`): its bytes from what the "
            "service stores (the latest progress while it runs; a cancelled one's last; the "
            "total once it completed)",
            "required": ["bytes_done", "bytes_total", "bytes_per_s", "file"],
            "properties": {
                "bytes_done": {
                    "type": ["integer", "null"],
                    "minimum": 0,
                    "description": "Bytes on disk: null before the first are counted; a failed or "
                    "cancelled download's last count; bytes_total once it completed",
                },
                "bytes_total": _COUNT,
                "bytes_per_s": {
                    "type": ["integer", "null"],
                    "minimum": 0,
                    "description": "Its speed while it runs (null before one is known, and "
                    "once it ended)",
                },
                "file": {
                    "type": ["string", "null"],
                    "description": "The file being fetched while it runs",
                },
                "retry_at": {
                    "type": "number",
                    "description": "Only while it waits for the hub: when it tries again "
                    "(Unix seconds)",
                },
                "retry_reason": {
                    "type": ["string", "null"],
                    "description": "Only while it waits for the hub: why",
                },
            },
        },
    },
}
TASK_LIST = {
    "type": "object",
    "required": ["object", "data", "has_more"],
    "properties": {
        "object": {"const": "list"},
        "data": {"type": "array", "items": TASK},
        "has_more": {"type": "boolean"},
    },
}
MESSAGE = {  # an input message (Open Responses message item, text content only)
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "type": {"enum": ["message"]},
        "role": {"enum": ["user", "assistant", "system", "developer"]},
        "content": {
            "oneOf": [
                {"type": "string"},
                {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["type", "text"],
                        "properties": {
                            "type": {"enum": ["input_text", "output_text", "text"]},
                            "text": {"type": "string"},
                        },
                    },
                },
            ]
        },
    },
}
TEXT_PARTS = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["type", "text"],
        "properties": {
            "type": {"enum": ["input_text", "output_text", "text"]},
            "text": {"type": "string"},
        },
    },
}
FUNCTION_CALL_ITEM = {  # a call the model made earlier, sent back with its result
    "type": "object",
    "required": ["type", "call_id", "name", "arguments"],
    "properties": {
        "type": {"enum": ["function_call"]},
        "call_id": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "arguments": {"type": "string"},
    },
}
FUNCTION_CALL_OUTPUT_ITEM = {
    "type": "object",
    "required": ["type", "call_id", "output"],
    "properties": {
        "type": {"enum": ["function_call_output"]},
        "call_id": {"type": "string", "minLength": 1},
        "output": {"oneOf": [{"type": "string"}, TEXT_PARTS]},
    },
}
TYPED = {"type": {"type": "string"}}
TOOL = {  # function tools are offered; other types are dropped and noted on the task
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"type": "string", "minLength": 1}},
}
TEXT_FIELD = {
    "type": ["object", "null"],
    "properties": {
        "format": {
            "type": ["object", "null"],
            "required": ["type"],
            # json_schema also takes `name` and a `schema` the grammar can enforce (not
            # every schema can be: those are refused naming the keyword).
            "properties": {"type": {"enum": ["text", "json_object"]}},
        }
    },
}
ITEM_REFERENCE = {
    "type": "object",
    "required": ["type", "id"],
    "properties": {"type": {"const": "item_reference"}, "id": NAME},
}
METADATA = {
    "type": ["object", "null"],
    "maxProperties": 16,
    "propertyNames": {"maxLength": 64},
    "additionalProperties": {"type": "string", "maxLength": 512},
}
CREATE_BODY = {
    "type": "object",
    "required": ["model", "input"],
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "input": {
            "oneOf": [
                {"type": "string"},
                {
                    "type": "array",
                    "items": {
                        "anyOf": [
                            MESSAGE,
                            ITEM_REFERENCE,
                            FUNCTION_CALL_ITEM,
                            FUNCTION_CALL_OUTPUT_ITEM,
                        ]
                    },
                    "minItems": 1,
                },
            ]
        },
        "previous_response_id": {"type": ["string", "null"], "minLength": 1},
        "prompt_cache_key": {"type": ["string", "null"], "maxLength": 1024},
        "safety_identifier": {"type": ["string", "null"], "maxLength": 1024},
        "instructions": {"type": ["string", "null"]},
        "max_output_tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": 1_000_000},
        "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
        "top_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
        "seed": {"type": ["integer", "null"], "minimum": -(2**63), "maximum": 2**63 - 1},
        "stream": {"type": ["boolean", "null"]},
        "background": {"type": ["boolean", "null"]},
        "store": {"type": ["boolean", "null"]},
        "metadata": METADATA,
        "presence_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
        "frequency_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
        "truncation": {"enum": ["auto", "disabled"]},
        "tools": {"type": ["array", "null"], "items": TOOL},
        # `required` and the object forms need matching tools in the same body, which a
        # schema cannot say: the document lists the forms valid on their own.
        "tool_choice": {"enum": ["none", "auto", None]},
        "parallel_tool_calls": {"type": ["boolean", "null"]},
        "max_tool_calls": {"type": ["integer", "null"], "minimum": 0, "maximum": 128},
        "text": TEXT_FIELD,
        "on_restart": {"enum": ["fail", "retry", "resume"]},
    },
}
CHAT_MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant"]},
        "content": MESSAGE["properties"]["content"],  # type: ignore[index]
    },
}
TOOL_MESSAGE = {
    "type": "object",
    "required": ["role", "content", "tool_call_id"],
    "properties": {
        "role": {"const": "tool"},
        "content": {"type": "string"},
        "tool_call_id": NAME,
    },
}
CHAT_TOOL = {
    "type": "object",
    "required": ["type", "function"],
    "properties": {
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
                "description": {"type": "string"},
            },
        },
    },
}
CHAT_BODY = {
    "type": "object",
    "required": ["model", "messages"],
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "messages": {
            "type": "array",
            "items": {"anyOf": [CHAT_MESSAGE, TOOL_MESSAGE]},
            "minItems": 1,
        },
        "max_tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": 1_000_000},
        "max_completion_tokens": {
            "type": ["integer", "null"],
            "minimum": 1,
            "maximum": 1_000_000,
        },
        "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
        "top_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
        "seed": {"type": ["integer", "null"], "minimum": -(2**63), "maximum": 2**63 - 1},
        "stop": {
            "oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 4},
                {"type": "null"},
            ]
        },
        "presence_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
        "frequency_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
        "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 1},
        "stream": {"type": ["boolean", "null"]},
        "store": {"type": ["boolean", "null"]},
        "user": {"type": ["string", "null"], "maxLength": 512},
        "metadata": METADATA,
        "tools": {"type": ["array", "null"], "items": CHAT_TOOL},
        "parallel_tool_calls": {"type": ["boolean", "null"]},
        "on_restart": {"enum": ["fail", "retry", "resume"]},
    },
}
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
}


HUB_TOKEN = {
    "name": "X-HF-Token",
    "in": "header",
    "required": False,
    "description": "the caller's Hugging Face token for this download only (never stored)",
    "schema": {"type": "string", "pattern": "^[!-~]{1,1024}$"},
}


def openapi_document(server_url: str) -> dict[str, Any]:
    read, write, admin = "responses:read", "responses:write", "admin"
    return {
        "openapi": "3.1.0",
        "info": {"title": "LMSP Desktop service", "version": __version__},
        "servers": [{"url": server_url or "http://127.0.0.1:5677"}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["type", "code", "message", "param"],
                            "properties": {
                                "type": {"type": "string"},
                                "code": {"type": "string"},
                                "message": {"type": "string"},
                                "param": {"type": ["string", "null"]},
                            },
                        }
                    },
                }
            },
        },
        "paths": {
            "/": {
                "get": _op(
                    "Ollama's root: `Ollama is running`, for clients checking the server is up",
                    None,
                    {
                        "200": {
                            "description": "Ollama is running",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                )
            },
            "/v1/health": {"get": _op("Health", None, {"200": _json(OBJ, "health")})},
            "/v1/models": {
                "get": _op(
                    "List models: all of them, or paged by limit and after (after_id, "
                    "before_id: Anthropic's names)",
                    "models:read",
                    {"200": _json(LIST, "models"), **_errors(400, 401, 403, 404)},
                    parameters=[
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                        },
                        {"name": "after", "in": "query", "schema": {"type": "string"}},
                        {"name": "after_id", "in": "query", "schema": {"type": "string"}},
                        {"name": "before_id", "in": "query", "schema": {"type": "string"}},
                    ],
                )
            },
            "/v1/models/{id}": {
                "get": _op(
                    "One model",
                    "models:read",
                    {"200": _json(OBJ, "model"), **_errors(401, 403, 404)},
                    parameters=[ID],
                )
            },
            "/v1/models/{id}/verify": {
                "post": _op(
                    "Hash a model's file again (the Models page's Verify selected): verified "
                    "when it is the file verified before, else still changed (observed_digest) "
                    "unless accept_new",
                    admin,
                    {"200": _json(OBJ, "the model"), **_errors(400, 401, 403, 404, 409)},
                    parameters=[ID],
                    requestBody={
                        "required": False,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {"accept_new": {"type": "boolean"}},
                                    "additionalProperties": False,
                                }
                            }
                        },
                    },
                )
            },
            "/v1/models/{id}/load": {
                "post": _op(
                    "Load a model now (`lmsp-desktop models load`; the Models page's Load "
                    "again): a model held after two engine crashes too",
                    admin,
                    {"200": _json(OBJ, "the model"), **_errors(401, 403, 404, 409, 500, 507)},
                    parameters=[ID],
                )
            },
            "/v1/models/{id}/unload": {
                "post": _op(
                    "Unload a model (`lmsp-desktop models unload`): at once, or when the "
                    "tasks running on it end (unload_pending)",
                    admin,
                    {"200": _json(OBJ, "the model"), **_errors(401, 403, 404)},
                    parameters=[ID],
                )
            },
            "/v1/models/rescan": {
                "post": _op(
                    "Look in the model folders and stores again (the Models page's Rescan)",
                    admin,
                    {"200": _json(LIST, "models"), **_errors(401, 403)},
                )
            },
            "/v1/models/pull": {
                "post": _op(
                    "Download a GGUF model from the Hugging Face hub (a task of kind download)",
                    admin,
                    {
                        "202": _json(OBJ, "the download task"),
                        **_errors(400, 401, 403, 404, 502, 503),
                    },
                    requestBody={
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["repo"],
                                    "properties": {
                                        "repo": {"type": "string"},
                                        "file": {"type": "string"},
                                        "quant": {"type": "string"},
                                        "revision": {"type": "string"},
                                        "on_restart": {"enum": ["fail", "retry", "resume"]},
                                    },
                                    "additionalProperties": False,
                                }
                            }
                        },
                    },
                    parameters=[IDEMPOTENCY_KEY, HUB_TOKEN],
                )
            },
            "/v1/responses": {
                "post": _op(
                    "Create a response",
                    write,
                    {
                        "200": _json(OBJ, "finished response (or an SSE stream)"),
                        "202": _json(OBJ, "accepted background response"),
                        **_errors(400, 401, 403, 404, 409, 413, 422, 500, 503),
                    },
                    requestBody={
                        "required": True,
                        "content": {"application/json": {"schema": CREATE_BODY}},
                    },
                    parameters=[IDEMPOTENCY_KEY],
                )
            },
            "/v1/responses/{id}": {
                "get": _op(
                    "Retrieve a response (or replay its stream)",
                    read,
                    {"200": _json(OBJ, "response"), **_errors(400, 401, 403, 404)},
                    parameters=[
                        ID,
                        {"name": "stream", "in": "query", "schema": {"type": "boolean"}},
                        {
                            "name": "starting_after",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0},
                        },
                    ],
                ),
                "delete": _op(
                    "Delete a finished response",
                    write,
                    {"200": _json(OBJ, "deleted"), **_errors(401, 403, 404, 409)},
                    parameters=[ID],
                ),
            },
            "/v1/responses/{id}/input_items": {
                "get": _op(
                    "A stored response's input items",
                    read,
                    {"200": _json(LIST, "input items"), **_errors(400, 401, 403, 404)},
                    parameters=[
                        ID,
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                        },
                        {"name": "after", "in": "query", "schema": {"type": "string"}},
                        {"name": "order", "in": "query", "schema": {"enum": ["asc", "desc"]}},
                    ],
                )
            },
            "/v1/chat/completions": {
                "post": _op(
                    "Create a chat completion (a task like any other)",
                    write,
                    {
                        "200": _json(OBJ, "chat.completion (or chat.completion.chunk SSE lines)"),
                        **_errors(400, 401, 403, 404, 409, 413, 422, 500, 503),
                    },
                    requestBody={
                        "required": True,
                        "content": {"application/json": {"schema": CHAT_BODY}},
                    },
                    parameters=[IDEMPOTENCY_KEY],
                )
            },
            "/v1/chat/completions/{id}": {
                "get": _op(
                    "Retrieve a stored chat completion",
                    read,
                    {"200": _json(OBJ, "chat.completion"), **_errors(401, 403, 404)},
                    parameters=[ID],
                ),
                "delete": _op(
                    "Delete a finished chat completion and its task",
                    write,
                    {"200": _json(OBJ, "deleted"), **_errors(401, 403, 404, 409)},
                    parameters=[ID],
                ),
            },
            "/v1/tasks/{id}/cancel": {
                "post": _op(
                    "Cancel a task, whichever API created it",
                    write,
                    {"200": _json(TASK, "task"), **_errors(401, 403, 404, 409)},
                    parameters=[ID],
                )
            },
            "/v1/responses/{id}/cancel": {
                "post": _op(
                    "Cancel a response",
                    write,
                    {"200": _json(OBJ, "response"), **_errors(401, 403, 404, 409)},
                    parameters=[ID],
                )
            },
            "/v1/tasks": {
                "get": _op(
                    "List tasks, newest first",
                    read,
                    {"200": _json(TASK_LIST, "tasks"), **_errors(400, 401, 403, 404)},
                    parameters=[
                        {
                            "name": "state",
                            "in": "query",
                            "schema": {"type": "string", "pattern": STATE_LIST},
                        },
                        {"name": "model", "in": "query", "schema": {"type": "string"}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                        },
                        {"name": "after", "in": "query", "schema": {"type": "string"}},
                    ],
                )
            },
            "/v1/tasks/{id}": {
                "get": _op(
                    "One task",
                    read,
                    {"200": _json(TASK, "task"), **_errors(401, 403, 404)},
                    parameters=[ID],
                )
            },
            "/v1/tasks/{id}/events": {
                "get": _op(
                    "A task's events (JSON pages, or SSE with Accept: text/event-stream)",
                    read,
                    {"200": _json(LIST, "events"), **_errors(400, 401, 403, 404)},
                    parameters=[
                        ID,
                        {
                            "name": "after",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0},
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                        },
                    ],
                )
            },
            "/v1/pairing": {
                "post": _op(
                    "Start pairing",
                    None,
                    {"200": _json(OBJ, "pairing started"), **_errors(400, 429)},
                    requestBody={
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["client_name"],
                                    "properties": {"client_name": NAME, "scopes": SCOPES},
                                }
                            }
                        },
                    },
                )
            },
            "/v1/pairing/{pairing_id}/token": {
                "post": _op(
                    "Poll for the token",
                    None,
                    {"200": _json(OBJ, "token"), **_errors(400, 404, 429)},
                    parameters=[PAIRING_ID],
                    requestBody={
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["pairing_secret"],
                                    "properties": {"pairing_secret": NAME},
                                }
                            }
                        },
                    },
                )
            },
            "/v1/pairing/claim": {
                "post": _op(
                    "Exchange a one-time code for a token",
                    None,
                    {"200": _json(OBJ, "token"), **_errors(400, 429)},
                    requestBody={
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["code", "client_name"],
                                    "properties": {
                                        "code": NAME,
                                        "client_name": NAME,
                                    },
                                }
                            }
                        },
                    },
                )
            },
            "/v1/clients": {
                "get": _op(
                    "List paired clients",
                    admin,
                    {"200": _json(LIST, "clients"), **_errors(401, 403)},
                )
            },
            "/v1/clients/{client_id}": {
                "delete": _op(
                    "Revoke a client",
                    admin,
                    {"200": _json(OBJ, "revoked"), **_errors(401, 403, 404)},
                    parameters=[CLIENT_ID],
                )
            },
            "/v1/recovery/last": {
                "get": _op(
                    "The last startup's recovery report",
                    admin,
                    {"200": _json(OBJ, "report"), **_errors(401, 403, 404)},
                )
            },
            "/v1/metrics": {
                "get": _op(
                    "Prometheus metrics",
                    admin,
                    {
                        "200": {
                            "description": "metrics",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        **_errors(401, 403),
                    },
                )
            },
            "/v1/openapi.json": {
                "get": _op("This document", None, {"200": _json(OBJ, "OpenAPI document")})
            },
        },
    }
