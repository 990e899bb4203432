"""The 409 errors that say why a model cannot run now and what to do about it."""

from __future__ import annotations

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.info import CHANGED, INVALID, MISSING, ModelInfo


def _conflict(message: str, code: str) -> LmspError:
    return LmspError(message, code=code, param="model", status=409, type="conflict_error")


def not_runnable(info: ModelInfo) -> LmspError:
    """Why `info` may not be loaded: its file is gone, changed, or not verified yet."""
    if info.state == MISSING:
        parts = info.missing_reason
        if parts is not None:  # its first part is there: naming it said "no longer at" it
            return _conflict(
                f"Model {info.id} is a split model and {parts} ({info.path.parent}), so "
                "llama.cpp cannot load it. Put every part back beside the first and rescan "
                "the model folders (Models page › Rescan, or `lmsp-desktop models rescan`), "
                "or choose another model.",
                "model_missing",
            )
        return _conflict(
            f"The file of model {info.id} is no longer at {info.path}. Put it back and rescan "
            "the model folders (Models page › Rescan, or `lmsp-desktop models rescan`), or "
            "choose another model.",
            "model_missing",
        )
    if info.state == INVALID:
        reason = info.meta.get("error") or "it is not a GGUF model file"
        return LmspError(
            f"{info.path} is not a model this service can load: {reason}. Replace it with a "
            "complete .gguf file, or choose another model.",
            code="model_invalid",
            param="model",
            status=400,
            type="invalid_request_error",
        )
    if info.state == CHANGED:
        return _conflict(
            f"The file of model {info.id} ({info.path}) changed since it was verified, so it "
            f"is not run. Verify it again (Models page › Verify selected, or `lmsp-desktop "
            f"models verify {info.id}`); if you replaced it on purpose, accept the new file "
            f"(Accept the new file, or `lmsp-desktop models verify {info.id} --accept-new`).",
            "model_changed",
        )
    return _conflict(
        f"Model {info.id} is not verified yet: its digest is still being computed or could "
        "not be read. Wait for the check to finish or verify it now (Models page › Verify "
        f"selected, or `lmsp-desktop models verify {info.id}`), then try again.",
        "model_unverified",
    )
