"""`bisect --engine exec -- CMD` (issue 38): the user's own command bisected over stacks, with
the exec options compare and soak take, the trials of a compare of the same plan counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers.native import build_flaky

pytestmark = pytest.mark.system

_CRASH_ENV = "FLAKY_CRASH_PCT"  # the stacks set it; the command passes it to flaky.c


@pytest.fixture(scope="module")
def flaky(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_flaky(tmp_path_factory.mktemp("flaky"))


def nightlies(path: Path, pcts: list[int]) -> Path:
    """Env-only stacks n1..nK (the tool's own interpreter), each with its crash percentage."""
    path.write_text("".join(f'[stacks.n{i}]\nenv = {{ {_CRASH_ENV} = "{p}" }}\n\n'
                            for i, p in enumerate(pcts, 1)))
    return path


def command(flaky: Path) -> list[str]:
    return ["sh", "-c", f'exec "$0" "$1" "${_CRASH_ENV}" 0', str(flaky), "{seed}"]


@pytest.mark.slow  # ~25-40 s here; the end-to-end test runs bisect --engine exec by default
def test_bisect_of_the_user_s_command_names_the_stack_whose_environment_makes_it_crash(
        tmp_path: Path, flaky: Path) -> None:
    stacks = nightlies(tmp_path / "s.toml", [0, 0, 0, 90, 90])
    plan = ["--stacks", str(stacks), "--engine", "exec", "-n", "2", "--workers", "1",
            "--timeout", "60s", "--done-regex", "^done$"]
    compared = run_cli("compare", "n1", "n5", *plan, "--trials", "2", "--seed", "100",
                       "--results", str(tmp_path / "runs" / "compare"), "-q", "--",
                       *command(flaky), timeout=300, cwd=tmp_path)
    assert compared.rc in (0, 1), compared.stdout + compared.stderr[-3000:]
    out = tmp_path / "runs" / "bisect"
    res = run_cli("bisect", "--good", "n1", "--bad", "n5", *plan, "--seed", "1", "--results",
                  str(out), "--", *command(flaky), timeout=600, cwd=tmp_path)
    assert res.rc == 0, res.stdout + res.stderr[-3000:]
    answer = res.stdout.partition("\n\n")[2]
    assert answer.startswith("BISECT  found: first bad stack: n4 (last good: n3)"), res.stdout
    assert "+ 4 trial(s) of the same plan from" in res.stderr  # the compare's, counted
    assert "exec" in res.stdout.partition("\n\n")[0]  # the header says which engine ran
    saved = json.loads((out / "bisect.json").read_text())
    assert saved["first_bad"] == "n4" and saved["from_disk"] == 4
    again = run_cli("bisect", "--good", "n1", "--bad", "n5", *plan, "--seed", "1", "--results",
                    str(out), "-q", "--", *command(flaky), timeout=300, cwd=tmp_path)
    assert again.rc == 0 and json.loads((out / "bisect.json").read_text())["ran"] == 0


@pytest.mark.slow  # ~1-2 min here: native trials run iree-run-module processes
def test_bisect_with_the_native_engine_names_the_stack_whose_library_crashes_iree_tools(
        tmp_path: Path, fault_lib: Path) -> None:
    fault = (f'env = {{ LD_PRELOAD = "{fault_lib}", IREE_FAULT_JOIN = "segv", '
             f'IREE_FAULT_JOIN_PROB = "0.5" }}\n')
    stacks = tmp_path / "s.toml"
    stacks.write_text(f"[stacks.n1]\n\n[stacks.n2]\n{fault}\n[stacks.n3]\n{fault}")
    res = run_cli("bisect", "--good", "n1", "--bad", "n3", "--stacks", str(stacks), "--engine",
                  "native", "-t", "cpu", "-n", "3", "-p", "unary.exp.f32*", "--seed", "1",
                  "--results", str(tmp_path / "bis"), "-q", timeout=900)
    assert res.rc == 0, res.stdout + res.stderr[-3000:]
    assert res.stdout.partition("\n\n")[2].startswith(
        "BISECT  found: first bad stack: n2 (last good: n1)"), res.stdout
    assert "native engine" in res.stdout.partition("\n\n")[0]
