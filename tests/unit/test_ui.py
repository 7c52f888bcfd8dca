"""stress/ui.py: live lines that say what a long step does (issue 28, item 2)."""

from __future__ import annotations

import io

import pytest

from stress import ui


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_ci_log_gets_the_first_state_at_once_then_one_line_per_period() -> None:
    out, clock = io.StringIO(), Clock()
    status = ui.Status(True, out, clock)
    status.update("compiling 0/10")
    status.update("compiling 1/10")  # same instant: held back
    clock.t += ui._PLAIN_PERIOD_S
    status.update("compiling 5/10")
    status.done("compiled 10")
    assert out.getvalue().splitlines() == ["compiling 0/10", "compiling 5/10", "compiled 10"]
    assert "\r" not in out.getvalue() and "\033" not in out.getvalue()


def test_a_new_phase_is_said_at_once_even_in_a_ci_log() -> None:
    out, clock = io.StringIO(), Clock()
    status = ui.Status(True, out, clock)
    status.update("checking the driver", force=True)
    status.update("compiling 0/3", force=True)
    assert out.getvalue().splitlines() == ["checking the driver", "compiling 0/3"]


def test_a_terminal_line_is_redrawn_in_place_and_left_on_screen_at_the_end() -> None:
    out, clock = FakeTerminal(), Clock()
    status = ui.Status(True, out, clock)
    status.update("compiling 0/10, 0 s")
    clock.t += ui._TTY_PERIOD_S
    status.update("compiling 9/10")
    status.say("FAIL worker w0 crashed")
    status.done("compiled 10")
    text = out.getvalue()
    assert text.startswith("\rcompiling 0/10, 0 s\rcompiling 9/10")
    assert "FAIL worker w0 crashed\n" in text and text.endswith("compiled 10\n")


def test_quiet_prints_nothing() -> None:
    out = FakeTerminal()
    status = ui.Status(False, out, Clock())
    status.update("x", force=True)
    status.say("y")
    status.done("z")
    assert out.getvalue() == ""


@pytest.mark.parametrize("no_color,dumb,want", [(None, False, True), ("1", False, False),
                                                (None, True, False)])
def test_colour_only_on_a_terminal_without_no_color(monkeypatch: pytest.MonkeyPatch,
                                                    no_color: str | None, dumb: bool,
                                                    want: bool) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "dumb" if dumb else "xterm")
    if no_color is not None:
        monkeypatch.setenv("NO_COLOR", no_color)
    assert ("\033[" in ui.red("FAIL", FakeTerminal())) is want
    assert ui.red("FAIL", io.StringIO()) == "FAIL"  # a log file: never


@pytest.mark.parametrize("done,total,elapsed,want", [(0, 10, 5.0, ""), (2, 10, 10.0,
                                                     "~40 s left"), (1, 3, 200.0,
                                                     "~6 min 40 s left"), (5, 5, 9.0, "")])
def test_time_left_comes_from_the_rate_so_far(done: int, total: int, elapsed: float,
                                              want: str) -> None:
    assert ui.eta(done, total, elapsed) == want


def test_an_error_takes_the_live_line_off_the_terminal_first() -> None:
    out = FakeTerminal()
    status = ui.Status(True, out, Clock())
    status.update("soak: starting", force=True)
    ui.erase_live()
    out.write("iree-stress: error: bad\n")
    assert out.getvalue().split("\r")[-1] == "iree-stress: error: bad\n"
    assert out.getvalue() == "\rsoak: starting\r" + " " * 14 + "\riree-stress: error: bad\n"


def test_a_step_that_waits_on_another_process_says_its_seconds_while_it_runs() -> None:
    """The driver check waits on another interpreter (seconds; more with a GPU driver or
    under load): its line moves instead of standing still (issue 28 item 2)."""
    import threading

    from tests.helpers.waits import wait_until

    out, clock = FakeTerminal(), Clock()
    status = ui.Status(True, out, clock)
    with status.ticking("checking the driver"):
        assert out.getvalue() == "\rchecking the driver, 0 s"  # at once
        clock.t += 3
        assert wait_until(lambda: "\rchecking the driver, 3 s" in out.getvalue(), 10)
        clock.t += 60
        assert wait_until(lambda: "\rchecking the driver, 1 min 3 s" in out.getvalue(), 10)
    assert not [t for t in threading.enumerate() if t.name == "status-ticker"]  # stopped
    quiet = FakeTerminal()
    with ui.Status(False, quiet, clock).ticking("checking the driver"):
        pass
    assert quiet.getvalue() == ""
