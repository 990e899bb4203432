"""The APIs the service speaks, one adapter each, over one kind of task.

Every API turns its request body into the same internal task request
(`task_request.py`), which is stored with the task; the runner generates from it whatever
API it came through, and the store writes the task's events in one shape (Open Responses
events, `resource.py` builds the objects they carry). An adapter then renders those events
as its own API's answer body and stream.

One folder per API, each with:
- `__init__.py`: its `Intake` (core/api/creation.py): the parser, the shape of its task ids,
  what it must look up in the store before the task exists;
- `request.py`: the body into the task request, every error naming the field as sent;
- `render.py` (where the API has its own shapes): the answer body from the task's row, the
  stream from its events;
- `routes.py`: its aiohttp routes, registered with one line in core/service/app.py.

Folders: `responses/` (OpenAI Responses, Open Responses), `chat/` (Chat Completions).

What every API shares lives here, once:
- `task_request.py`: the internal request's keys and defaults, the messages the model sees;
- `fields.py`: field parsers (numbers, flags, metadata, text content) with named errors;
- `creation.py`: the one creation path (refuse, parse, prepare, model, context, key, create);
- `answering.py`: answering a created task over HTTP (SSE, wait, cancel on disconnect,
  idempotency key settled);
- `failures.py`: a failed task's HTTP error for a client that waited for it;
- `resource.py`: the task as an Open Responses `ResponseResource` and the LMSP task object.

Tools and output formats are parsed by core/tools/fields.py, shared by the APIs that offer
tools; the grammar and the tool-call parser are core/tools/ too.

Adding an API: a new folder here, and one line in core/service/app.py.
"""
