"""Schemathesis (every check) against the service's own /v1/openapi.json on a running real
Core with an admin token: zero server errors, zero responses that break the documented
schemas, status codes, content types or headers, no auth ignored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fuzz import FuzzResult, run_schemathesis

# Examples per operation of the fuzzing phase (`make torture ARGS=--fuzz-examples N` runs
# more). The coverage phase (each schema's boundary and invalid values, made without a
# budget) and the stateful phase (linked operations) run whatever the number; 25 gives
# about 2,200 cases over the 35 operations. Six planted bugs were found by 25 exactly as by
# 50: a number field's type check removed (a 500) by both, by the fuzzing phase alone too;
# an empty integer query value taken as absent, a 500 on an events page past the end, a
# cancel answering a string `restarts`, a 500 on non-Latin-1 instructions, and tools with
# duplicate names refused with 400 (its exception below removed) by neither (the torture
# run's 1,000 examples are for those). 50 cost 6 more CPU-s than 25 for nothing more.
EXAMPLES = 25
# The two checks once held back for documentation defects (empty strings refused without a
# minLength; TRACE answered 404, not 405); both were fixed and now run with the others.
DOCUMENTATION_CHECKS = ("positive_data_acceptance", "unsupported_method")


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzResult]:
    """One schemathesis run with every check, shared by the tests that read it."""
    result = run_schemathesis(tmp_path_factory.mktemp("fuzz"), EXAMPLES, exclude=())
    print(result.summary())
    yield result


# A bound on a hang, not on its speed (the run shares the test's time budget).
@pytest.mark.timeout(900)
def test_schemathesis_all_checks_find_no_failure(fuzzed: FuzzResult) -> None:
    assert fuzzed.ok, fuzzed.output[-6000:]
    assert fuzzed.cases >= 2000, fuzzed.summary()
    assert "not_a_server_error" not in fuzzed.output


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


@pytest.mark.timeout(900)
def test_schemathesis_documentation_checks(fuzzed: FuzzResult) -> None:
    """The two documentation checks (DOCUMENTATION_CHECKS), held back once, run on the shared
    run with every other check (none excluded) and find nothing."""
    assert fuzzed.ok, fuzzed.summary()


async def test_an_empty_integer_query_value_is_refused_as_the_schema_says(tmp_path: Path) -> None:
    from tests.support.fake_core import running_core, session, token

    async with (
        running_core(tmp_path / "data") as core,
        session(core, await token(core)) as http,
        http.get("/v1/tasks?limit=") as r,
    ):
        assert r.status == 400, await r.text()  # found by the 1,000-example torture fuzz
