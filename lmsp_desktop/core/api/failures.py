"""How a task that failed (or was cancelled) answers a client that waited for it: an HTTP
error with the reason, as OpenAI answers, instead of a 200 carrying a failed body."""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.errors import LmspError, error_type

# A task's error code → the HTTP status that says who can fix it.
STATUS_OF_CODE = {
    "context_length_exceeded": 400,
    "invalid_input": 400,
    "chat_template_error": 400,
    "embeddings_unsupported": 400,  # an upstream's model, a reranker
    "model_not_found": 404,
    "model_unverified": 409,
    "model_changed": 409,
    # The file is gone (409 as the refusal before a task says it; a 500 said "our fault").
    "model_missing": 409,
    "model_invalid": 400,
    "cancelled": 409,
    "upstream_unavailable": 502,
    # The model's load could not fit the memory when its turn came (core/models/fitting.py).
    "insufficient_memory": 507,
    "server_restarted": 503,
}
# The openai SDKs retry 409 and 5xx answers unless told not to: the failure is recorded in
# the task, and repeating the same request would mostly fail the same way. Every 401 says it
# too (service/middleware.py auth): Claude Code retries a 401 without it, for minutes.
NO_RETRY = {"x-should-retry": "false"}
# Statuses whose answers carry it whatever route gave them (service/request_ids.py): a 507
# (the model's load cannot fit the memory, the disk is full) is the same a second later; the
# anthropic SDK retried insufficient_memory twice.
NOT_RETRIED = frozenset({507})


def task_failure(response: dict[str, Any], *, when_output: bool) -> LmspError | None:
    """The error a waiting client gets for this finished response, or None when the answer
    is the response itself. `when_output`: fail even when some output was generated (Chat
    Completions has no way to say "failed" in a 200 body)."""
    state = response["task"]["state"]
    if state == "failed":
        if response["output_text"] and not when_output:
            return None
        error = response["error"] or {}
        code = error.get("code") or "generation_failed"
        message = f"{error.get('message') or 'The generation failed.'} (task {response['id']})"
    elif state == "cancelled" and when_output:
        code = "cancelled"
        message = (
            f"The request was cancelled before it finished (task {response['id']}); its "
            f"partial output is in GET /v1/tasks/{response['id']}/events."
        )
    else:
        return None
    status = STATUS_OF_CODE.get(code, 500)
    # The type the same status has when refused before a task (409 conflict_error, 404
    # not_found_error), not invalid_request_error for every 4xx.
    return LmspError(message, code=code, status=status, type=error_type(status))
