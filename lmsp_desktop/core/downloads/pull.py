"""The one way a download task is created, whoever asks: `POST /v1/models/pull`,
`lmsp-desktop models pull` and the Download dialog all call `pull`.

The order: check the repo id → list its files on the hub (size, LFS sha256; off the event
loop) → pick the model by file name or quant (a clear error listing the choices otherwise)
→ commit the task with its first event. Nothing is stored when the hub says no.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lmsp_desktop.core.downloads.hub import (
    GgufChoice,
    gguf_choices,
    list_files,
    parse_reference,
    pick,
    read_reference,
    search,
)
from lmsp_desktop.core.downloads.token import hub_token
from lmsp_desktop.core.errors import LmspError, invalid
from lmsp_desktop.core.states import RestartPolicy
from lmsp_desktop.core.storage.downloads import NewDownload, create_download
from lmsp_desktop.core.storage.idempotency import IdempotencyClaim
from lmsp_desktop.core.storage.tasks import TaskStore


def split_reference(reference: str) -> tuple[str, str | None]:
    """`owner/name[:QUANT|:FILE]`, `hf.co/owner/name:QUANT`, a hub address → (repo,
    selector) (hub.parse_reference). One it cannot read is split as written, so that `pull`
    (here, or the service's) refuses it in its own words."""
    try:
        return parse_reference(reference)
    except LmspError:
        repo, _, selector = reference.partition(":")
        return repo, selector or None


async def pull(
    tasks: TaskStore,
    repo: str,
    selector: str | None = None,
    *,
    revision: str = "main",
    on_restart: str | None = None,
    client_id: str | None = None,
    task_id: str | None = None,
    claim: IdempotencyClaim | None = None,
    token: str | None = None,
) -> dict[str, Any]:
    """Create the download task of `repo`'s model named by `selector` (a file or a quant);
    returns the task object once committed. `claim`: an Idempotency-Key already claimed
    for `task_id`, whose answer is stored with the task. `token`: the caller's own hub
    token for this pull (else this process's: HF_TOKEN, the keyring); never stored.
    `repo` may be written any way parse_reference reads (hf.co/owner/name, an address of
    the repo or of its file, owner/name:QUANT): what it names is the selector, unless one
    is given, which must then agree. So must `revision` with the one a pasted address names
    (`…/blob/v2/x.gguf` pulls v2; `revision` main, the default, gives way to it)."""
    repo, named, addressed = read_reference(repo)
    if addressed is not None and revision not in ("main", addressed):
        raise invalid(
            f"The repo's address names revision {addressed}, the request {revision}: give one "
            "of them.",
            "revision",
        )
    revision = addressed or revision
    try:
        policy = RestartPolicy(on_restart or RestartPolicy.RESUME)
    except ValueError:
        raise invalid("on_restart must be fail, retry or resume.", "on_restart") from None
    commit, files = await asyncio.to_thread(list_files, repo, revision, token or hub_token())
    choice = pick(repo, files, named or selector)
    if named and selector and pick(repo, files, selector) != choice:
        raise invalid(
            f"The repo's reference names {named}, the request {selector}: give one of them.",
            "repo",
        )
    spec = NewDownload(
        repo=repo,
        revision=revision,
        commit=commit,
        files=[f.as_json() for f in choice.files],
        model=download_name(repo, gguf_choices(files), choice),
        on_restart=policy,
        client_id=client_id,
    )
    if task_id is not None:
        spec.id = task_id
    return await create_download(tasks, spec, claim)


def download_name(repo: str, choices: list[GgufChoice], choice: GgufChoice) -> str:
    """The name a download task goes by: `repo:QUANT` (`bartowski/Qwen2.5-7B-Instruct-GGUF:
    Q4_K_M`, as Ollama's and LM Studio's users write a hub model) whenever the quant names
    this one file of the repo, however it was asked for (a quant, a file name, the Download
    dialog's row, nothing); else `repo:file`. The same file gets the same name whichever way
    it was pulled, and the name pulls it again. `choices`: the repo's (gguf_choices)."""
    if choice.quant and sum(c.quant == choice.quant for c in choices) == 1:
        return f"{repo}:{choice.quant}"
    return f"{repo}:{choice.name}"


async def search_hub(query: str) -> list[dict[str, Any]]:
    """Repos with GGUF files matching `query` (the Download dialog's search)."""
    return await asyncio.to_thread(search, query.strip(), hub_token())


async def repo_models(repo: str) -> list[GgufChoice]:
    """The models a repo offers (the Download dialog's file list)."""
    repo = parse_reference(repo)[0]
    _commit, files = await asyncio.to_thread(list_files, repo, "main", hub_token())
    return gguf_choices(files)
