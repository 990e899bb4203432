"""OpenAI Chat Completions (`/v1/chat/completions`).

- request.py: the body into the task request;
- render.py: the `chat.completion` from the task's row, `chat.completion.chunk` lines from
  its events;
- routes.py: create (sync or stream), retrieve and delete stored completions.
"""

from __future__ import annotations

from lmsp_desktop.core.api.chat.render import new_chat_id
from lmsp_desktop.core.api.chat.request import parse_chat
from lmsp_desktop.core.api.creation import Intake

INTAKE = Intake(parse=parse_chat, new_id=new_chat_id, input_param="messages")
