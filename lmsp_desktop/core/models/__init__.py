"""Model folders, digests and GGUF metadata."""

from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.core.models.info import ModelEvent, ModelInfo
from lmsp_desktop.core.models.registry import ModelRegistry

__all__ = ["ModelEvent", "ModelInfo", "ModelRegistry", "demo_model_path"]
