"""OpenAI Responses and Open Responses (`/v1/responses`): the task's events are this API's
stream as they are (the store writes Open Responses events), so it renders least.

- request.py: the body into the task request (input items kept for `input_items`);
- conversation.py: `previous_response_id` and `item_reference` resolved from the store;
- routes.py: create (sync, stream, background), retrieve, replay, cancel, delete, items.
"""

from __future__ import annotations

from lmsp_desktop.core.api.creation import Intake
from lmsp_desktop.core.api.responses.conversation import resolve
from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.ids import new_id


def new_response_id() -> str:
    """A response and its task share one id: `resp_…`."""
    return new_id("resp")


INTAKE = Intake(parse=parse_create, new_id=new_response_id, prepare=resolve, can_truncate=True)
