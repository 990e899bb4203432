"""The download tests' hub: its repos, where their files land in the cache, and waits."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmsp_desktop.core.storage.store import Store
from tests.support.fake_hub import FakeHub, HubRepo, demo_gguf
from tests.support.polling import until

DEMO_REPO = "lmsp-test/SmolLM2-135M-Instruct-GGUF"
DEMO_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_REPO = "lmsp-test/Tiny-GGUF"
GATED_REPO = "lmsp-test/Gated-GGUF"
PLAIN_REPO = "lmsp-test/tiny-safetensors"
TINY_SIZE = 3 * 1024 * 1024 + 17


def pseudo_random(size: int, seed: str) -> bytes:
    """Incompressible test bytes (a sha256 stream), so no layer can shortcut them."""
    out = bytearray()
    block = seed.encode()
    while len(out) < size:
        block = hashlib.sha256(block).digest() * 1024
        out += block
    return b"GGUF" + bytes(out[: size - 4])


def hub_repos() -> list[HubRepo]:
    return [
        HubRepo(
            DEMO_REPO,
            {DEMO_FILE: demo_gguf(), "README.md": b"# SmolLM2 135M Instruct, GGUF\n"},
            downloads=500,
        ),
        HubRepo(
            TINY_REPO,
            {
                "tiny-Q4_K_M.gguf": pseudo_random(TINY_SIZE, "q4"),
                "tiny-Q8_0.gguf": pseudo_random(TINY_SIZE + 1, "q8"),
                "split/tiny-Q2_K-00001-of-00002.gguf": pseudo_random(1024 * 1024, "p1"),
                "split/tiny-Q2_K-00002-of-00002.gguf": pseudo_random(512 * 1024, "p2"),
                "mmproj-tiny-f16.gguf": pseudo_random(4096, "mm"),
                "README.md": b"tiny\n",
            },
            downloads=10,
        ),
        HubRepo(GATED_REPO, {"gated-Q4_0.gguf": pseudo_random(200_000, "g")}, gated=True),
        HubRepo(
            PLAIN_REPO,
            {"config.json": b"{}", "model.safetensors": pseudo_random(1000, "st")},
        ),
    ]


@dataclass
class Hub:
    server: FakeHub
    cache: Path

    def blob_dir(self, repo: str) -> Path:
        return self.cache / f"models--{repo.replace('/', '--')}" / "blobs"

    def leftovers(self, repo: str) -> list[str]:
        """Files under the repo's cache folder that could be mistaken for a model: blobs,
        partial files, snapshot links."""
        folder = self.cache / f"models--{repo.replace('/', '--')}"
        if not folder.exists():
            return []
        return sorted(
            str(p.relative_to(folder))
            for p in folder.rglob("*")
            if p.is_file() or p.is_symlink()
            if "refs" not in p.parts
        )


async def finished(store: Store, task_id: str, limit: float = 60.0) -> Any:
    """The task's row once it has reached a terminal state."""

    async def done() -> Any:
        row = await store.tasks.get(task_id)
        return row if row["state"] in ("completed", "failed", "cancelled") else None

    return await until(done, limit, f"download {task_id} to finish")


def error_of(row: Any) -> dict[str, Any]:
    return json.loads(row["error"]) if row["error"] else {}
