"""The Hugging Face hub as the downloads see it: a repo's GGUF files, picking one by quant or
name, and search. Blocking calls through `huggingface_hub` (run them in a worker thread).

`HF_ENDPOINT` (a mirror, or the tests' fake hub) and `HF_TOKEN` are honoured by the library
itself; a token kept in the keyring is passed explicitly.
"""

from __future__ import annotations

import logging
import os
import re
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from lmsp_desktop.core.errors import LmspError, invalid, not_found

# Parts of a split model: name-00001-of-00003.gguf.
SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
# A quantisation as GGUF publishers write it in file names: Q4_K_M, IQ3_XS, Q8_0, F16, BF16.
QUANT = re.compile(
    r"(?:^|[-._])((?:I?Q\d+(?:_[A-Z0-9]+)*)|BF16|FP16|F16|F32)(?=[-._])", re.IGNORECASE
)
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
T = TypeVar("T")
# What the user is told to do when a download the hub kept from finishing fails; a download
# still waiting for the hub leaves it out (the service tries again by itself: what_happened).
UNREACHABLE_ADVICE = "Check the network, or point HF_ENDPOINT at a mirror, and try again."
CUT_ADVICE = "Check the network and pull again: it continues from there."
HUB_ERROR_ADVICE = "Try again later; the bytes already here are kept."
DEFAULT_ENDPOINT = "https://huggingface.co"


def endpoint() -> str:
    """The hub's address, read at each call: `HF_ENDPOINT` (a mirror, the tests' fake hub)."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def cache_dir() -> str:
    """The Hugging Face cache, resolved at each call as the model scanner resolves it (so a
    download lands where the Hugging Face source looks)."""
    from lmsp_desktop.core.models.sources import hf_cache_root

    return str(hf_cache_root(os.environ, Path.home()))


@dataclass(frozen=True)
class HubFile:
    """One file of a repo, with what the hub publishes about it."""

    name: str
    size: int | None
    sha256: str | None  # the LFS digest; None for files not stored in LFS

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class GgufChoice:
    """A model a repo offers: one file, or the parts of a split model, and its quant."""

    files: tuple[HubFile, ...]
    quant: str | None

    @property
    def name(self) -> str:
        """The first part's name (what llama.cpp opens)."""
        return self.files[0].name

    @property
    def size(self) -> int:
        return sum(f.size or 0 for f in self.files)

    def label(self) -> str:
        parts = f" ({len(self.files)} parts)" if len(self.files) > 1 else ""
        return f"{self.name}{parts}"


def downloaded(repo: str, choice: GgufChoice) -> bool:
    """Whether every file of `choice` is in the Hugging Face cache at the repo's `main`."""
    from huggingface_hub import try_to_load_from_cache

    return all(
        isinstance(try_to_load_from_cache(repo, part.name, cache_dir=cache_dir()), str)
        for part in choice.files
    )


def quant_of(name: str) -> str | None:
    """The quantisation in a GGUF file name (the last one found), upper-case."""
    found = QUANT.findall(name.rsplit("/", 1)[-1])
    return found[-1].upper() if found else None


REPO_FORMS = (
    "owner/name, for example bartowski/Qwen2.5-7B-Instruct-GGUF (hf.co/owner/name:Q4_K_M "
    "and https://huggingface.co/owner/name addresses work too)"
)
# Hosts whose addresses name a repo: the hub's own two, and HF_ENDPOINT's (a mirror).
HUB_HOSTS = ("huggingface.co", "hf.co")
# The address parts after owner/name that a revision follows (…/blob/v2/x.gguf, …/tree/v2).
REVISION_PAGES = ("blob", "resolve", "tree")


def check_repo(repo: str) -> str:
    repo = repo.strip()
    if not REPO_ID.match(repo):
        raise invalid(f"{repo!r} is not a Hugging Face repo id; write it as {REPO_FORMS}.", "repo")
    return repo


def parse_reference(text: str) -> tuple[str, str | None]:
    """What a person writes or pastes for a hub model → (repo id, selector: a quant or a file
    name, or None). The one parser of the CLI's `models pull`, the API's pull and the
    Download dialog's search box. Takes `owner/name[:QUANT|:FILE]`, the same behind `hf.co/`
    or `huggingface.co/` (as the Models table's Location shows it and `ollama pull` takes it),
    and an https address of a repo or of one of its files (`…/blob/main/x.gguf`,
    `…/resolve/main/x.gguf`: the file becomes the selector). Anything else: invalid, naming
    the forms. The revision an address names is reference_revision's."""
    repo, selector, _revision = read_reference(text)
    return repo, selector


def reference_revision(text: str) -> str | None:
    """The revision (branch, tag or commit) a pasted hub address names: `v2` in
    `…/blob/v2/x.gguf`, `…/resolve/v2/x.gguf` or `…/tree/v2`; None for any other form, which
    names none (the pull's `revision`, main by default, applies)."""
    return read_reference(text)[2]


def read_reference(text: str) -> tuple[str, str | None, str | None]:
    """parse_reference's (repo, selector) and reference_revision's revision, in one read."""
    ref = text.strip()
    hosts = {*HUB_HOSTS, (urlsplit(endpoint()).hostname or "").lower()}
    if "://" not in ref and any(ref.lower().startswith(f"{h}/") for h in HUB_HOSTS):
        ref = f"https://{ref}"
    if "://" in ref:
        url = urlsplit(ref)
        host = (url.hostname or "").lower().removeprefix("www.")
        # Split before unquoting: a revision such as refs/pr/1 is one part, `refs%2Fpr%2F1`.
        parts = [unquote(p) for p in url.path.split("/") if p]
        if url.scheme.lower() not in ("http", "https") or host not in hosts or len(parts) < 2:
            raise invalid(
                f"{text.strip()!r} is not the address of a Hugging Face repo; write it as "
                f"{REPO_FORMS}.",
                "repo",
            )
        revision = parts[3] if len(parts) > 3 and parts[2] in REVISION_PAGES else None
        if len(parts) > 4 and parts[2] in ("blob", "resolve"):
            return check_repo("/".join(parts[:2])), "/".join(parts[4:]), revision
        # The repo's page, one of its tabs (tree/v2, …), or hf.co/owner/name:QUANT.
        ref = "/".join(parts[:2])
    else:
        revision = None
    repo, _, selector = ref.partition(":")
    return check_repo(repo), selector.strip() or None, revision


def gguf_choices(files: list[HubFile]) -> list[GgufChoice]:
    """The models among a repo's files: GGUFs (projectors left out), split parts together."""
    singles: list[GgufChoice] = []
    groups: dict[str, list[HubFile]] = {}
    for f in files:
        base = f.name.rsplit("/", 1)[-1].lower()
        if not base.endswith(".gguf") or base.startswith("mmproj"):
            continue
        split = SPLIT.search(f.name)
        if split:
            groups.setdefault(f.name[: split.start()], []).append(f)
        else:
            singles.append(GgufChoice((f,), quant_of(f.name)))
    for parts in groups.values():
        parts.sort(key=lambda f: f.name)
        singles.append(GgufChoice(tuple(parts), quant_of(parts[0].name)))
    return sorted(singles, key=lambda c: c.name)


def pick(repo: str, files: list[HubFile], selector: str | None) -> GgufChoice:
    """The model `selector` names in the repo: a file name, else a quant; with no selector,
    the repo's only model. A clear error listing the choices otherwise."""
    choices = gguf_choices(files)
    if not choices:
        names = ", ".join(f.name for f in files[:8]) or "no files"
        raise LmspError(
            f"{repo} has no GGUF files ({names}). LMSP runs GGUF models: look for a "
            f"GGUF conversion of it, for example by searching the hub for its name and GGUF.",
            code="no_gguf_files",
            param="repo",
            status=404,
            type="not_found_error",
        )
    if selector:
        wanted = selector.strip().lower()
        for choice in choices:
            if any(f.name.lower() in (wanted, wanted + ".gguf") for f in choice.files):
                return choice
            if choice.name.rsplit("/", 1)[-1].lower() in (wanted, wanted + ".gguf"):
                return choice
        by_quant = [c for c in choices if (c.quant or "").lower() == wanted]
        if len(by_quant) == 1:
            return by_quant[0]
        if by_quant:
            raise _choose(repo, by_quant, f"Several files of {repo} have quant {selector}")
        raise _choose(repo, choices, f"{repo} has no file or quant {selector!r}", missing=True)
    if len(choices) == 1:
        return choices[0]
    raise _choose(repo, choices, f"{repo} has {len(choices)} GGUF models; name one")


def _choose(repo: str, choices: list[GgufChoice], why: str, missing: bool = False) -> LmspError:
    listing = "; ".join(f"{c.label()} [{c.quant or '?'}]" for c in choices)
    example = choices[0].quant or choices[0].name
    message = f"{why}. Its GGUF files: {listing}. Pull one as {repo}:{example}."
    if missing:
        return not_found(message, "file_not_found", "file")
    return invalid(message, "file", "file_ambiguous")


def list_files(repo: str, revision: str, token: str | None) -> tuple[str, list[HubFile]]:
    """(the revision's commit, its files with size and LFS sha256). Blocking."""
    from huggingface_hub import HfApi

    info = _hub_call(
        lambda: HfApi(endpoint=endpoint()).model_info(
            repo, revision=revision, files_metadata=True, token=token
        ),
        repo,
        revision,
    )
    files = [
        HubFile(s.rfilename, s.size, s.lfs.sha256 if s.lfs else None) for s in info.siblings or []
    ]
    return info.sha or revision, files


SEARCH_TIMEOUT_S = 10.0  # a person waits on a search: one try, not the library's backoff


def search(query: str, token: str | None, limit: int = 30) -> list[dict[str, Any]]:
    """Repos matching `query` that carry GGUF files, most downloaded first. Blocking.

    One GET of the hub's `/api/models`, not `HfApi.list_models`: that one goes through
    huggingface_hub's `http_backoff` (five retries, 1 s doubling to 8 s, each logged), so an
    unreachable hub kept the Download dialog at "Searching..." for some 25 s, while a pull
    against the same hub failed at once. A search is typed by a person who can press Enter
    again; it fails as fast as a pull does, with the same sentence."""
    from huggingface_hub.utils._headers import build_hf_headers
    from huggingface_hub.utils._http import get_session, hf_raise_for_status

    params = {"search": query, "filter": "gguf", "sort": "downloads", "limit": str(limit)}

    def one_try() -> Any:
        response = get_session().get(
            f"{endpoint()}/api/models",
            params=params,
            headers=build_hf_headers(token=token),
            timeout=SEARCH_TIMEOUT_S,
        )
        hf_raise_for_status(response)
        return response.json()

    found = _hub_call(one_try, query)
    return [
        {"id": m["id"], "downloads": m.get("downloads"), "likes": m.get("likes")}
        for m in found
        if isinstance(m, dict) and "id" in m
    ]


def library_logs_once() -> None:
    """huggingface_hub gives its logger a stderr handler of its own and lets it propagate
    too, so each of its warnings ("Retrying in 2s [Retry 1/5].") was printed twice: raw, and
    through the app's logging. Its records go through the app's logging only (with none
    set up, Python's last-resort handler still prints warnings)."""
    library = logging.getLogger("huggingface_hub")
    for handler in list(library.handlers):
        if type(handler) is logging.StreamHandler:
            library.removeHandler(handler)


def _hub_call(call: Callable[[], T], what: str, revision: str | None = None) -> T:
    """Run a hub call about `what` (a repo, a search) at `revision`; its errors as sentences
    that say what to do."""
    import httpx2
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    library_logs_once()  # huggingface_hub is imported by now
    try:
        return call()
    except GatedRepoError as exc:
        raise gated_error(what) from exc
    except RepositoryNotFoundError as exc:
        raise not_found(
            f"The hub has no repo {what} (or it is private and no token was given). Check the "
            "name; for a private repo, give LMSP your Hugging Face token (Keep token in the "
            "Download dialog, or HF_TOKEN) and pull again.",
            "repo_not_found",
            "repo",
        ) from exc
    except RevisionNotFoundError as exc:
        asked = f" {revision!r}" if revision else ""
        raise not_found(
            f"{what} has no revision{asked}. Name a branch, tag or commit it has "
            "(--revision; main by default).",
            "revision_not_found",
            "revision",
        ) from exc
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "no"
        raise hub_unreachable(f"answered HTTP {status}") from exc
    except (OSError, httpx2.TransportError) as exc:  # refused, DNS, TLS, timed out
        raise hub_unreachable(_reason(exc)) from exc


# HTTP answers that say "not now" rather than "no": the hub (or a proxy before it) is down,
# overloaded or rate-limiting, and the same request may go through later.
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def transient(exc: LmspError) -> bool:
    """Whether `exc` (a download's failure) says the hub could not be reached for now, so
    the same request may work later: no connection (refused, DNS, TLS, timed out), a cut
    that kept coming back, a 408/429/5xx. Never a 401/403/404, a gated repo, a full disk
    or a digest that differs: waiting changes none of those."""
    if exc.code == "download_interrupted":
        return True
    if exc.code not in ("hub_unreachable", "hub_error"):
        return False
    cause = exc.__cause__
    status = getattr(getattr(cause, "response", None), "status_code", None)  # HfHubHTTPError
    if status is None and isinstance(cause, urllib.error.HTTPError):
        status = cause.code
    if status is not None:
        return int(status) in TRANSIENT_STATUS
    return exc.code == "hub_unreachable"  # no answer at all: refused, DNS, timed out


def what_happened(exc: LmspError) -> str:
    """A transient failure's message without what it tells the user to do ("…and try
    again"): the words of a download that waits and tries again by itself."""
    for advice in (UNREACHABLE_ADVICE, CUT_ADVICE, HUB_ERROR_ADVICE):
        if exc.message.endswith(advice):
            return exc.message[: -len(advice)].rstrip()
    return exc.message


def _reason(exc: BaseException) -> str:
    """The short cause of a connection failure ("Connection refused"), never a URL with a
    token in it (the library's messages carry none, but say only the cause anyway)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    return type(exc).__name__


def gated_error(repo: str) -> LmspError:
    return LmspError(
        f"{repo} is gated: accept its terms on huggingface.co, then give LMSP a Hugging Face "
        "token (Keep token in the Download dialog, or HF_TOKEN) and pull again.",
        code="repo_gated",
        param="repo",
        status=403,
        type="permission_error",
    )


def hub_unreachable(why: str) -> LmspError:
    return LmspError(
        f"The Hugging Face hub at {endpoint()} cannot be reached ({why}). {UNREACHABLE_ADVICE}",
        code="hub_unreachable",
        status=502,
        type="server_error",
    )
