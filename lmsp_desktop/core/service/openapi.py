"""The OpenAPI 3.1 document of what this service implements (served at /v1/openapi.json)."""

from __future__ import annotations

from typing import Any

from lmsp_desktop import __version__

ERROR = {"$ref": "#/components/schemas/Error"}


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
CREATE_BODY = {
    "type": "object",
    "required": ["model", "input"],
    "properties": {
        "model": {"type": "string"},
        "input": {"oneOf": [{"type": "string"}, {"type": "array", "items": OBJ}]},
        "instructions": {"type": ["string", "null"]},
        "max_output_tokens": {"type": ["integer", "null"], "minimum": 1},
        "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
        "top_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
        "seed": {"type": ["integer", "null"]},
        "stream": {"type": ["boolean", "null"]},
        "background": {"type": ["boolean", "null"]},
        "store": {"type": ["boolean", "null"]},
        "metadata": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
        "on_restart": {"enum": ["fail", "retry", "resume"]},
    },
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
            "/v1/health": {"get": _op("Health", None, {"200": _json(OBJ, "health")})},
            "/v1/models": {
                "get": _op(
                    "List models",
                    "models:read",
                    {"200": _json(LIST, "models"), **_errors(401, 403)},
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
            "/v1/responses": {
                "post": _op(
                    "Create a response",
                    write,
                    {
                        "200": _json(OBJ, "finished response (or an SSE stream)"),
                        "202": _json(OBJ, "accepted background response"),
                        **_errors(400, 401, 403, 404, 409, 413, 422, 503),
                    },
                    requestBody={
                        "required": True,
                        "content": {"application/json": {"schema": CREATE_BODY}},
                    },
                    parameters=[
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                        }
                    ],
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
                    {"200": _json(LIST, "tasks"), **_errors(400, 401, 403)},
                    parameters=[
                        {"name": "state", "in": "query", "schema": {"type": "string"}},
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
                    {"200": _json(OBJ, "task"), **_errors(401, 403, 404)},
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
                                    "properties": {"client_name": {"type": "string"}, "scopes": {}},
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
                                    "properties": {"pairing_secret": {"type": "string"}},
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
                                        "code": {"type": "string"},
                                        "client_name": {"type": "string"},
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
