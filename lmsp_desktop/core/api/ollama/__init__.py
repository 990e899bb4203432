"""Ollama's API (`/api/chat`, `/api/generate`, `/api/tags`, `/api/ps`, `/api/show`,
`/api/version`) on the service's own port, for the ollama clients, Open WebUI and Continue.

- request.py: chat and generate bodies into the task request (options, format, tools);
- names.py: a model name into a model (`x:latest` is `x`), a model into the name shown;
- render.py: NDJSON lines or one object from the task's events; the model objects;
- errors.py: Ollama's `{"error": …}` bodies, and its words for the routes it lacks here;
- truncate.py: an input longer than the context made to fit, as Ollama does;
- routes.py: the routes.
"""

from __future__ import annotations

from lmsp_desktop.core.api.chat.render import new_chat_id
from lmsp_desktop.core.api.creation import Intake
from lmsp_desktop.core.api.ollama.names import find_model
from lmsp_desktop.core.api.ollama.request import parse_ollama_chat, parse_ollama_generate
from lmsp_desktop.core.api.ollama.truncate import shorten_like_ollama

CHAT_INTAKE = Intake(
    parse=parse_ollama_chat,
    new_id=new_chat_id,
    input_param="messages",
    find_model=find_model,
    shorten=shorten_like_ollama,
)
GENERATE_INTAKE = Intake(
    parse=parse_ollama_generate,
    new_id=new_chat_id,
    input_param="prompt",
    find_model=find_model,
    shorten=shorten_like_ollama,
)
