"""Schemathesis (every check) against the service's own /v1/openapi.json on a running real
Core with an admin token: zero server errors, zero responses that break the documented
schemas, status codes, content types or headers, no auth ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fuzz import run_schemathesis

EXAMPLES = 200  # per operation (`make torture ARGS=--fuzz-examples N` runs more)
# Two checks still fail on documentation defects reported to the service's owner (see the
# reliability report): schema-valid bodies with empty strings refused with 400 (the schema
# lacks minLength), and TRACE on a known path answering 404 instead of 405.
KNOWN_DEFECTS = ("positive_data_acceptance", "unsupported_method")


# Heavy by design: on a loaded machine (make test's two workers plus other work) it took
# over 300 s, the suite's hang bound; this is a bound on a hang, not on its speed.
@pytest.mark.timeout(900)
def test_schemathesis_all_checks_find_no_failure(tmp_path: Path) -> None:
    result = run_schemathesis(tmp_path, EXAMPLES, exclude=KNOWN_DEFECTS)
    print(result.summary())
    assert result.ok, result.output[-6000:]
    assert result.cases >= 2000, result.summary()
    assert "not_a_server_error" not in result.output


async def test_odd_but_well_formed_bodies_are_4xx_not_500(tmp_path: Path) -> None:
    from tests.support.fake_core import MODEL, running_core, session, token

    async with running_core(tmp_path / "data") as core, session(core, await token(core)) as http:
        probes = [
            (b'{"model": "%s", "input": "x", "on_restart": [1]}' % MODEL.encode(), {}),
            (
                b'{"model": "%s", "input": "\\ud800", "background": true}' % MODEL.encode(),
                {"Idempotency-Key": "surrogate"},
            ),
        ]
        for raw, headers in probes:
            async with http.post(
                "/v1/responses",
                data=raw,
                headers={"Content-Type": "application/json", **headers},
            ) as r:
                assert r.status < 500, (raw, r.status, await r.text())


# -- defects found (kept uncommitted until fixed; see the reliability report) ---------------
def test_schemathesis_documentation_checks(tmp_path: Path) -> None:

    result = run_schemathesis(tmp_path, 50)
    assert result.ok, result.summary()


async def test_an_empty_integer_query_value_is_refused_as_the_schema_says(tmp_path: Path) -> None:
    from tests.support.fake_core import running_core, session, token

    async with (
        running_core(tmp_path / "data") as core,
        session(core, await token(core)) as http,
        http.get("/v1/tasks?limit=") as r,
    ):
        assert r.status == 400, await r.text()  # found by the 1,000-example torture fuzz
