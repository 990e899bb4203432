"""Errors the service and GUI show to people: one class, mapped once to HTTP and once to Qt."""

from __future__ import annotations

from typing import Any


class LmspError(Exception):
    """An error a client or user can act on: an HTTP status, an error type and code, a message.

    The message is a sentence that says what happened and what to do next. `param` names the
    offending request field, as OpenAI's errors do.
    """

    status = 400
    type = "invalid_request_error"

    def __init__(
        self,
        message: str,
        *,
        code: str,
        param: str | None = None,
        status: int | None = None,
        type: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        if status is not None:
            self.status = status
        if type is not None:
            self.type = type
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "type": self.type,
            "code": self.code,
            "message": self.message,
            "param": self.param,
        }
        error.update(self.extra)
        return {"error": error}


# The error type each status answers with, whichever path gives it (a refusal at admission
# or a task that failed while its client waited): the openai SDKs pick their exception by
# status alone (409 → ConflictError), so the body's type is the one word a user reads, and
# one status said with two types (a 409 model_changed as conflict_error when refused at
# admission, as invalid_request_error when the queued task failed) reads as two errors.
_TYPE_OF_STATUS = {404: "not_found_error", 409: "conflict_error"}


def error_type(status: int) -> str:
    """The error type for an HTTP status: not_found_error (404), conflict_error (409),
    server_error (5xx), else invalid_request_error."""
    if status >= 500:
        return "server_error"
    return _TYPE_OF_STATUS.get(status, "invalid_request_error")


def invalid(message: str, param: str | None, code: str = "invalid_value") -> LmspError:
    return LmspError(message, code=code, param=param, status=400)


def not_found(message: str, code: str = "not_found", param: str | None = None) -> LmspError:
    return LmspError(message, code=code, param=param, status=404, type=error_type(404))


def conflict(message: str, code: str, **extra: Any) -> LmspError:
    return LmspError(message, code=code, status=409, type=error_type(409), extra=extra)


class StorageFullError(LmspError):
    """The disk (or the database's page limit) is full: nothing was written."""

    status = 507
    type = "server_error"

    def __init__(self, path: str) -> None:
        super().__init__(
            f"The disk holding {path} is full, so nothing was saved. "
            "Free some space and try again; everything saved before is intact.",
            code="storage_full",
        )


class StorageReadOnlyError(LmspError):
    """The database (or its folder) cannot be written: permissions or a read-only disk."""

    status = 507
    type = "server_error"

    def __init__(self, path: str) -> None:
        super().__init__(
            f"The database {path} cannot be written (no write permission on it or its "
            "folder, or a read-only disk), so nothing was saved. Give this user write access "
            "to the data directory, or choose another with --data-dir (or LMSP_DATA_DIR).",
            code="storage_read_only",
        )


class DatabaseLockedError(LmspError):
    """Another process holds the database's write lock for too long."""

    status = 503
    type = "server_error"

    def __init__(self, path: str) -> None:
        super().__init__(
            f"The database {path} is locked by another program. "
            "Close the other LMSP Desktop instance or tool using it, then try again.",
            code="database_locked",
        )


class ShuttingDownError(LmspError):
    """The service is stopping: new work is refused, and what was being answered is left for
    recovery at the next start (a sync request's 503, a stream's error ending)."""

    status = 503
    type = "server_error"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            message
            or "The service is shutting down and takes no new work. Retry once it has restarted.",
            code="shutting_down",
        )


class PausedError(LmspError):
    """The owner paused new work (drain): accepted tasks finish, new ones are refused."""

    status = 503
    type = "server_error"

    def __init__(self) -> None:
        super().__init__(
            "The service is paused by its owner and takes no new work right now; tasks already "
            "accepted still finish. Retry later.",
            code="paused",
        )
