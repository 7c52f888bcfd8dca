from __future__ import annotations

import click
import pytest

from stress.options import parse_duration


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("2h", 7200), ("1h30m", 5400),
                                          ("45", 45), ("0.5s", 0.5), ("10m", 600)])
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0s", "-5s", "abc", "", "5x"])
def test_bad_or_non_positive_durations_are_rejected(text: str) -> None:
    with pytest.raises(click.BadParameter):
        parse_duration(text)
