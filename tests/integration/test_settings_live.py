"""Settings saved while the service runs take effect at once, without losing tasks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from lmsp_desktop.app import Core
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models.demo import demo_model_path
from tests.support.lifecycle import started


async def test_saved_settings_apply_to_the_running_core(tmp_path: Path) -> None:
    async with started(
        Core(tmp_path / "data", port=0, engine=FakeEngine(), include_demo=False)
    ) as core:
        models = tmp_path / "models"
        models.mkdir()
        demo = demo_model_path()
        assert demo is not None
        (models / "tiny.gguf").symlink_to(demo)
        wanted = dataclasses.replace(
            core.settings,
            retention_days=2.0,
            default_on_restart="resume",
            max_loaded_models=3,
            idle_unload_s=42.0,
            model_dirs=[str(models)],
        )
        await core.store.save_settings(wanted)
        assert core.apply_settings(wanted) is True  # the folders changed: a rescan is due
        await core.scan_models()
        found = await core.registry.list_models()
        assert len(found) == 1  # the folder added in the settings was scanned
        assert core.runner.max_loaded_models == 3 and core.runner.idle_unload_s == 42.0
        assert core.settings.retention_days == 2.0
        # The default policy applies to the next request at once.
        submitted = await core.submit(found[0].id, "hello")
        assert (await core.store.tasks.get(submitted))["on_restart"] == "resume"
