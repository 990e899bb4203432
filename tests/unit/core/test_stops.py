"""Stop sequences: the text before one is released, the stop sequence never is."""

from __future__ import annotations

from lmsp_desktop.core.stops import StopScanner


def run(stops: list[str], pieces: list[str]) -> tuple[str, bool]:
    scanner = StopScanner(stops)
    out = ""
    for piece in pieces:
        released, stopped = scanner.feed(piece)
        out += released
        if stopped:
            return out, True
    return out + scanner.flush(), False


def test_a_stop_split_across_pieces_is_never_released() -> None:
    assert run(["END"], ["Hello E", "N", "D and more"]) == ("Hello ", True)


def test_a_false_start_is_released_once_it_cannot_be_a_stop() -> None:
    scanner = StopScanner(["END"])
    assert scanner.feed("Hello E") == ("Hello ", False)
    assert scanner.feed("x") == ("Ex", False)
    assert run(["END"], ["a E", "N"]) == ("a EN", False)  # flushed at the end


def test_the_earliest_of_several_stops_wins() -> None:
    assert run(["\n\n", "b"], ["a", "bc\n\nd"]) == ("a", True)


def test_held_text_survives_a_resume_through_the_snapshot() -> None:
    first = StopScanner(["END"])
    first.feed("Hello EN")
    resumed = StopScanner(["END"], held=first.held)
    assert resumed.feed("D") == ("", True)


def test_the_matched_stop_is_named() -> None:
    scanner = StopScanner(["\n\n", "b"])
    assert scanner.matched is None
    scanner.feed("a")
    assert scanner.matched is None
    scanner.feed("bc\n\nd")
    assert scanner.matched == "b"  # the earliest in the text, not the first listed
    split = StopScanner(["END"])
    split.feed("Hello EN")
    split.feed("D!")
    assert split.matched == "END"  # completed across two pieces
