"""The paired clients' table applies a new read as row inserts, removals and changed cells
(the Clients page reads every two seconds while shown): a valid model throughout
(qtmodeltester watching every change), no reset for a client made or revoked, no signal at
all for a read that changed nothing."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.gui.models.client_table import COL_NAME, COL_SEEN, ClientTableModel

pytestmark = pytest.mark.gui


def client(n: int, seen: int | None = None) -> dict[str, Any]:
    return {
        "id": f"cl_{n}",
        "name": f"bot-{n}",
        "scopes": ["responses:write"],
        "created_at": 1_700_000_000 + n,
        "last_seen_at": seen,
        "last_seen_addr": "127.0.0.1" if seen else None,
        "token_prefix": f"lmsp_{n:04d}",
    }


def newest_first(*numbers: int, seen: dict[int, int] | None = None) -> list[dict[str, Any]]:
    return [client(n, (seen or {}).get(n)) for n in sorted(numbers, reverse=True)]


def test_a_new_read_is_applied_row_by_row(qtmodeltester: Any) -> None:
    model = ClientTableModel(core=None)
    model.apply(newest_first(1, 2, 3))
    qtmodeltester.check(model, force_py=True)
    signals: list[str] = []
    model.modelReset.connect(lambda: signals.append("reset"))
    model.rowsInserted.connect(lambda _p, first, last: signals.append(f"+{first}-{last}"))
    model.rowsRemoved.connect(lambda _p, first, last: signals.append(f"-{first}-{last}"))
    model.dataChanged.connect(lambda a, b, *_: signals.append(f"~{a.row()}-{b.row()}"))

    def names() -> list[str]:
        return [model.index(r, COL_NAME).data() for r in range(model.rowCount())]

    model.apply(newest_first(1, 2, 3))
    assert signals == []  # nothing changed: nothing redrawn
    model.apply(newest_first(1, 2, 3, 4, 5))  # two tokens made in a shell
    assert signals == ["+0-0", "+1-1"] and names() == ["bot-5", "bot-4", "bot-3", "bot-2", "bot-1"]
    signals.clear()
    model.apply(newest_first(1, 3, 5, seen={3: 1_700_000_100}))  # 2 and 4 revoked, 3 used
    assert signals == ["-3-3", "-1-1", "~1-1"] and names() == ["bot-5", "bot-3", "bot-1"]
    assert "from 127.0.0.1" in model.index(1, COL_SEEN).data()
    signals.clear()
    model.apply([])
    assert signals == ["-2-2", "-1-1", "-0-0"] and model.rowCount() == 0
