"""`--numerics` as a user runs it (issue 37): a wrong result is a miscompare under the default,
passes under `off`, and the header says which was done."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli


def _soak(tmp_path: Path, name: str, *extra: str) -> tuple[int, str]:
    res = run_cli("soak", "--target", "cpu", "--programs", "unary.abs.f32.64x64",
                  "--patterns", "shared", "--invocations", "40", "--workers", "1",
                  "--inject", "corrupt@invoke:0.5", "--results", str(tmp_path / name), *extra)
    numerics = next(line for line in res.stdout.splitlines() if line.startswith("numerics:"))
    return res.rc, numerics


def test_numerics_off_lets_a_wrong_result_pass_and_says_so(tmp_path: Path) -> None:
    rc, numerics = _soak(tmp_path, "checked")
    assert (rc, numerics) == (1, "numerics: numpy reference")
    rc, numerics = _soak(tmp_path, "off", "--numerics", "off")
    assert (rc, numerics) == (0, "numerics: results not checked (--numerics off)")


def test_an_unknown_numerics_mode_is_one_usage_line(tmp_path: Path) -> None:
    res = run_cli("soak", "--target", "cpu", "--numerics", "exact", "--results",
                  str(tmp_path / "r"))
    assert res.rc == 2
    assert "Invalid value for '--numerics'" in res.stderr and "Traceback" not in res.stderr
