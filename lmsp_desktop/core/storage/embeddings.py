"""Embedding tasks in the store: their vectors are written with their completion.

An embedding task (kind `embedding`) has no token events: queued → (loading →) running →
completed, like any task, and its vectors are committed in the same transaction as the
completion (rule 11.2: nothing is answered before it is saved), as float32 little-endian
rows (`responses.embeddings`), read back by the API that renders them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from lmsp_desktop.core.engines.base import EmbeddingResult
from lmsp_desktop.core.states import EventType, TaskState
from lmsp_desktop.core.storage.events import closing_with
from lmsp_desktop.core.storage.tasks import TaskStore
from lmsp_desktop.core.storage.transitions import Transition

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


async def finish_embedding(tasks: TaskStore, task_id: str, result: EmbeddingResult) -> bool:
    """running → completed with the vectors and usage; False when no longer running (a
    cancel was committed first)."""
    import numpy as np  # here: `serve` imports this module, numpy costs ~0.2 s at its start

    vectors = np.ascontiguousarray(result.vectors, dtype="<f4")
    now = time.time()
    move = Transition(
        (task_id,),
        (TaskState.RUNNING,),
        TaskState.COMPLETED,
        closing_with(EventType.COMPLETED),
        task_sets={"finished_at": now, "snapshot": None},
        response_sets={
            "completed_at": int(now),
            "input_tokens": result.input_tokens,
            "output_tokens": 0,
            "embeddings": vectors.tobytes(),
            "embedding_dimensions": int(vectors.shape[1]) if vectors.ndim == 2 else 0,
        },
    )
    return bool(await tasks.transition(move))


async def vectors_of(tasks: TaskStore, task_id: str) -> Any:
    """The stored vectors' row (`embeddings`, `embedding_dimensions`) of a task."""
    return await tasks.db.fetchone(
        "SELECT embeddings, embedding_dimensions FROM responses WHERE id=?", (task_id,)
    )


def stored_vectors(row: Any) -> npt.NDArray[np.float32]:
    """The vectors of a completed embedding task's row, one per input."""
    import numpy as np  # here, not at the top: see finish_embedding

    dimensions = int(row["embedding_dimensions"] or 0)
    data = np.frombuffer(row["embeddings"] or b"", dtype="<f4")
    return data.reshape(-1, dimensions) if dimensions else data.reshape(0, 0)
