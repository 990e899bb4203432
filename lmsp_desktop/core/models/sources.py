"""The model stores other apps keep, read where they are: LM Studio, Ollama, the Hugging Face
cache (blocking: run in a worker thread).

Read-only: nothing in them is moved, renamed or deleted. Their locations are read from the
environment at every scan, as the apps themselves do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from pathlib import Path

from lmsp_desktop.core.models.discovery import (
    FoundFile,
    SourceProblem,
    is_model_filename,
    stat_file,
    unreadable,
)
from lmsp_desktop.core.models.gguf_meta import quant_from_filename
from lmsp_desktop.core.models.ids import source_model_id

LMSTUDIO = "lmstudio"
OLLAMA = "ollama"
HUGGINGFACE = "huggingface"
# The stores looked in, in this order (the first to name a file names the model).
SOURCES = (LMSTUDIO, OLLAMA, HUGGINGFACE)
# Every `source` a model can have, as the window shows it.
SOURCE_LABELS = {
    "folder": "Folder",
    LMSTUDIO: "LM Studio",
    OLLAMA: "Ollama",
    HUGGINGFACE: "Hugging Face",
    "demo": "Demo",
    "upstream": "Upstream",
}
# Who published the digest a store names its blobs by ("the digest Hugging Face published").
PUBLISHERS = {OLLAMA: "Ollama", HUGGINGFACE: "Hugging Face"}
# Ollama's Linux service keeps its store here (readable only to some users).
OLLAMA_SERVICE_STORE = Path("/usr/share/ollama/.ollama/models")
# The file in the user's home naming LM Studio's home when it is not ~/.lmstudio.
LMSTUDIO_POINTER = ".lmstudio-home-pointer"


def publisher_of(source: str) -> str:
    return PUBLISHERS.get(source, "its publisher")


def lmstudio_home(home: Path, problems: list[SourceProblem] | None = None) -> Path:
    """LM Studio's home: the folder `~/.lmstudio-home-pointer` names (LM Studio writes that
    file, and a user who moved the home edits it), else `~/.lmstudio`."""
    pointer = home / LMSTUDIO_POINTER
    try:
        named = pointer.read_text(encoding="utf-8").strip().splitlines()
    except (OSError, UnicodeDecodeError):
        named = []
    if named and named[0].strip():
        pointed = Path(named[0].strip()).expanduser()
        if pointed.is_dir():
            return pointed
        if problems is not None:
            problems.append(
                SourceProblem(
                    LMSTUDIO,
                    str(pointed),
                    f"LM Studio's home {pointed} (named in {pointer}) is not there, so "
                    f"{home / '.lmstudio'} is read instead. Mount the disk that holds it, or "
                    f"correct {pointer}.",
                )
            )
    return home / ".lmstudio"


def lmstudio_models_setting(
    lms_home: Path, problems: list[SourceProblem] | None = None
) -> Path | None:
    """The Models Directory chosen in LM Studio (`downloadsFolder` in its home's
    settings.json), or None when none is set or the file cannot be read (said in
    `problems`)."""
    settings = lms_home / "settings.json"
    try:
        folder = json.loads(settings.read_text(encoding="utf-8")).get("downloadsFolder")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        if problems is not None:
            problems.append(
                SourceProblem(
                    LMSTUDIO,
                    str(settings),
                    f"cannot read LM Studio's settings {settings} ({_why(exc)}), so its Models "
                    "Directory is not known: only its default folders are read. Open LM Studio "
                    "once to rewrite the file.",
                )
            )
        return None
    return Path(folder).expanduser() if isinstance(folder, str) and folder.strip() else None


def lmstudio_roots(home: Path, problems: list[SourceProblem] | None = None) -> list[Path]:
    """Where LM Studio keeps models: the Models Directory set in it, its home's `models`
    folder (the home `~/.lmstudio-home-pointer` names), and the folders earlier releases used
    (`~/.lmstudio/models`, `~/.cache/lm-studio/models`). A Models Directory that is not
    there (a disk not mounted) is said in `problems`."""
    lms_home = lmstudio_home(home, problems)
    roots: list[Path] = []
    chosen = lmstudio_models_setting(lms_home, problems)
    if chosen is not None:
        roots.append(chosen)
        if not chosen.is_dir() and problems is not None:
            problems.append(
                SourceProblem(
                    LMSTUDIO,
                    str(chosen),
                    f"LM Studio's Models Directory {chosen} (set in {lms_home / 'settings.json'}) "
                    "is not there, so its models are not listed. Mount the disk that holds it, "
                    "or choose the folder again in LM Studio (My Models).",
                )
            )
    for root in (
        lms_home / "models",
        home / ".lmstudio" / "models",
        home / ".cache" / "lm-studio" / "models",
    ):
        if root not in roots:
            roots.append(root)
    return roots


def ollama_roots(env: Mapping[str, str], home: Path) -> list[Path]:
    """`$OLLAMA_MODELS`, else `~/.ollama/models`; and the Linux service's store if readable."""
    roots = [Path(env["OLLAMA_MODELS"])] if env.get("OLLAMA_MODELS") else []
    roots = roots or [home / ".ollama" / "models"]
    if os.access(OLLAMA_SERVICE_STORE, os.R_OK | os.X_OK):
        roots.append(OLLAMA_SERVICE_STORE)
    return roots


def hf_cache_root(env: Mapping[str, str], home: Path) -> Path:
    """`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub` (as huggingface_hub
    resolves it, but at scan time rather than at import)."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    return home / ".cache" / "huggingface" / "hub"


def find_in_sources(enabled: Collection[str], problems: list[SourceProblem]) -> list[FoundFile]:
    """The model files of every enabled store; what could not be read goes to `problems`."""
    from lmsp_desktop.core.models.source_hf import find_hf_cache
    from lmsp_desktop.core.models.source_ollama import find_ollama

    env, home = os.environ, Path.home()
    found: list[FoundFile] = []
    if LMSTUDIO in enabled:
        for root in lmstudio_roots(home, problems):
            found += find_lmstudio(root, problems)
    if OLLAMA in enabled:
        for root in ollama_roots(env, home):
            found += find_ollama(root, problems)
    if HUGGINGFACE in enabled:
        found += find_hf_cache(hf_cache_root(env, home), problems)
    return found


def find_lmstudio(root: Path, problems: list[SourceProblem]) -> list[FoundFile]:
    """`<root>/<publisher>/<repo>/*.gguf`, named `publisher/repo:quant`."""
    if not root.is_dir():
        return []  # not installed: nothing to say
    found: list[FoundFile] = []
    for publisher in _subfolders(root, problems):
        for repo in _subfolders(publisher, problems):
            try:
                with os.scandir(repo) as entries:
                    names = sorted(e.name for e in entries if is_model_filename(e.name))
            except OSError as exc:
                problems.append(unreadable(LMSTUDIO, repo, exc))
                continue
            for name in names:
                path = repo / name
                st = stat_file(path)
                if st is None:
                    problems.append(_gone(LMSTUDIO, path))
                    continue
                tag = quant_from_filename(name) or name[: -len(".gguf")]
                found.append(
                    FoundFile(
                        path.absolute(),
                        st.st_size,
                        st.st_mtime_ns,
                        source=LMSTUDIO,
                        name=source_model_id([publisher.name, repo.name], tag),
                    )
                )
    return found


def _subfolders(folder: Path, problems: list[SourceProblem]) -> list[Path]:
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as exc:
        problems.append(unreadable(LMSTUDIO, folder, exc))
        return []
    folders = []
    for entry in entries:
        try:
            if entry.is_dir():
                folders.append(Path(entry.path))
        except OSError as exc:  # a link that leads nowhere readable (a loop)
            problems.append(unreadable(LMSTUDIO, entry.path, exc))
    return folders


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, ValueError):
        return "not valid JSON"
    return "not a JSON object"


def _gone(source: str, path: Path) -> SourceProblem:
    """A model file name that leads nowhere: a broken symlink, a file deleted meanwhile."""
    return SourceProblem(
        source,
        str(path),
        f"{path} leads to no file (a broken link, or a file deleted or moved); it is not "
        "listed. Download it again with the app it came from, or remove the link.",
    )
