"""Every parser builds its task request with task_request(): a field it does not know, or an
API's own key that would shadow one, is a bug it must hear about at once (a misspelt key
would leave the default in force silently)."""

from __future__ import annotations

import pytest

from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.api.task_request import DEFAULTS, request_of, task_request


def test_known_fields_over_the_defaults_then_own_keys() -> None:
    made = task_request({"raw_stop": ["x"]}, model="m", temperature=0.1)
    assert list(made) == [*DEFAULTS, "raw_stop"]
    assert (made["model"], made["temperature"], made["raw_stop"]) == ("m", 0.1, ["x"])
    assert made["top_p"] == DEFAULTS["top_p"]
    assert task_request() == DEFAULTS and task_request() is not DEFAULTS


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(KeyError, match=r"not task request fields: \['temprature'\]"):
        task_request(model="m", temprature=0.1)


def test_an_own_key_shadowing_a_field_is_refused() -> None:
    with pytest.raises(KeyError, match=r"own keys shadowing them: \['model'\]"):
        task_request({"model": "x", "mine": 1}, temperature=0.1)


def test_request_of_takes_the_fields_as_one_dict_and_checks_them_alike() -> None:
    fields = {"model": "m", "temperature": 0.1}
    assert request_of(fields) == task_request(model="m", temperature=0.1)
    assert fields == {"model": "m", "temperature": 0.1}  # not changed
    with pytest.raises(KeyError, match=r"\['temprature'\]"):
        request_of({"model": "m", "temprature": 0.1})


def test_a_responses_request_has_every_field_and_no_other() -> None:
    request = parse_create({"model": "m", "input": "hi", "tools": [], "text": {}}, "fail")
    assert list(request) == list(DEFAULTS)
