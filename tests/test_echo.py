"""`echo`: a user's content quoted in a message, cut to a bounded length on one line."""

from __future__ import annotations

from attndeploy.echo import ECHO_LIMIT, echo


def test_a_short_text_is_kept_as_it_is() -> None:
    assert echo("max_batch_size: [") == "max_batch_size: ["
    assert echo("x" * ECHO_LIMIT) == "x" * ECHO_LIMIT


def test_a_long_text_keeps_its_start_and_says_its_length() -> None:
    assert echo("x" * 604_123) == "x" * ECHO_LIMIT + "... (604123 characters)"
    assert echo("abcdef", limit=3) == "abc... (6 characters)"


def test_line_breaks_are_escaped_so_a_message_stays_one_line() -> None:
    assert echo("a\nb\r\nc") == "a\\nb\\r\\nc"
