"""OpenAI's legacy completions (`/v1/completions`), for editor autocomplete.

- request.py: the body into the task request (`prompt` continued without a chat template,
  `suffix` for fill-in-the-middle);
- render.py: the `text_completion` from the task's row, its chunks from its events;
- routes.py: create (sync or stream).
"""

from __future__ import annotations

from lmsp_desktop.core.api.completions.render import new_completion_id
from lmsp_desktop.core.api.completions.request import parse_completion
from lmsp_desktop.core.api.creation import Intake

INTAKE = Intake(parse=parse_completion, new_id=new_completion_id, input_param="prompt")
