"""The scopes a client may hold, defined once: the HTTP routes, pairing, the CLI and the
window's scope pickers all import them from here."""

from __future__ import annotations

MODELS_READ = "models:read"
RESPONSES_READ = "responses:read"
RESPONSES_WRITE = "responses:write"
ADMIN = "admin"

SCOPES = (MODELS_READ, RESPONSES_READ, RESPONSES_WRITE, ADMIN)
# What a client that names no scopes gets: everything but administration.
DEFAULT_SCOPES = (MODELS_READ, RESPONSES_READ, RESPONSES_WRITE)
