"""Anthropic Messages (`/v1/messages`, `/v1/messages/count_tokens`), for the anthropic SDKs
and Claude Code (`ANTHROPIC_BASE_URL` is the service root).

- request.py: the body into the task request (system, text / tool_use / tool_result blocks,
  tools with `input_schema`, tool_choice auto / any / tool / none);
- render.py: the `message` from the task's row, the `message_start` … `message_stop`
  stream from its events, errors in Anthropic's shape;
- routes.py: create (sync or stream) and count_tokens.
"""

from __future__ import annotations

from lmsp_desktop.core.api.anthropic.render import new_message_id
from lmsp_desktop.core.api.anthropic.request import parse_messages_request
from lmsp_desktop.core.api.creation import Intake

INTAKE = Intake(parse=parse_messages_request, new_id=new_message_id, input_param="messages")
