"""Request bodies as the service reads them (core/service/bodies.py)."""

from __future__ import annotations

import json

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.service.bodies import read_json


class Body:
    """What read_json uses of an aiohttp request: its raw body."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    async def read(self) -> bytes:
        return self.raw


# Each alone in its body: 19 digits past -2**63, 20 past 2**64 - 1, and far past.
@pytest.mark.parametrize("number", [10**30, -(2**70), 2**64, -(2**63) - 1, -(10**19 - 1)])
async def test_integers_past_64_bits_arrive_exact(number: int) -> None:
    schema = {"type": "integer", "maximum": number}
    read = await read_json(Body(json.dumps({"schema": schema}).encode()))  # type: ignore[arg-type]
    assert read == {"schema": schema}
    assert isinstance(read["schema"]["maximum"], int)


@pytest.mark.parametrize(
    "raw",
    [b'{"a": NaN}', b'{"a": Infinity, "b": 123456789012345678901234}', b"{", b"\xff"],
)
async def test_what_json_does_not_allow_is_refused(raw: bytes) -> None:
    with pytest.raises(LmspError) as refused:
        await read_json(Body(raw))  # type: ignore[arg-type]
    assert refused.value.code == "invalid_json"
