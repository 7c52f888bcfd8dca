"""`compare` and `gate` on the user's own command (`--engine exec -- CMD`, issue 14): real runs
of tests/native/flaky.c, a test program that crashes in its cleanup when its seed says so, as
users see the verdicts (exit code and text)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers.native import build_flaky

pytestmark = pytest.mark.system

_CRASH_ENV = "FLAKY_CRASH_PCT"  # the stacks set it; the command passes it to flaky.c
_LOW_PCT, _HIGH_PCT = 0, 70  # with 3 jobs a trial, a B trial fails ~97% of the time, A never


@pytest.fixture(scope="module")
def flaky(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_flaky(tmp_path_factory.mktemp("flaky"))


def env_command(flaky: Path) -> list[str]:
    """flaky.c with its crash percentage from the environment (the stack's env), as a user
    wraps a test whose knob is an argument: `sh -c` with the job's `{seed}`."""
    return ["sh", "-c", f'exec "$0" "$1" "${_CRASH_ENV}" 0', str(flaky), "{seed}"]


def write_stacks(path: Path) -> Path:
    # env-only stacks: no requirements, so no venv (the tool's own interpreter)
    path.write_text(f'[stacks.calm]\nenv = {{ {_CRASH_ENV} = "{_LOW_PCT}" }}\n\n'
                    f'[stacks.crashy]\nenv = {{ {_CRASH_ENV} = "{_HIGH_PCT}" }}\n')
    return path


def test_compare_says_b_worse_when_b_s_environment_makes_the_command_crash_more(
        tmp_path: Path, flaky: Path) -> None:
    out = tmp_path / "cmp"
    res = run_cli("compare", "calm", "crashy", "--stacks", str(write_stacks(tmp_path / "s.toml")),
                  "--engine", "exec", "-n", "3", "--trials", "20", "--seed", "11",
                  "--results", str(out), "--", *env_command(flaky), timeout=600, cwd=tmp_path)
    assert res.rc == 1, res.stdout + res.stderr[-3000:]
    head, _, answer = res.stdout.partition("\n\n")  # what was tested, then the answer
    assert head.startswith("iree-stress: ") and "\ntarget: " in head, res.stdout
    first, reason, arm_a, arm_b = answer.splitlines()[:4]
    assert first.startswith("VERDICT  B worse  (A = calm, B = crashy;")
    assert "harness" not in first and "cannot start" not in reason
    assert arm_a.split()[:2] == ["A", "calm"] and arm_a.split()[2].startswith("0/")
    assert arm_b.split()[:2] == ["B", "crashy"] and not arm_b.split()[2].startswith("0/")
    saved = json.loads((out / "compare.json").read_text())
    assert saved["verdict"] == "B worse"
    for trial in saved["per_trial"]:  # each trial ran the command under its own stack's env
        summary = json.loads((Path(trial["run_dir"]) / "summary.json").read_text())
        want = str(_LOW_PCT if trial["stack"] == "calm" else _HIGH_PCT)
        assert summary["manifest"]["config"]["env"][_CRASH_ENV] == want
        assert trial["jobs"] + trial["failures"] >= 3 and not trial["harness"]
    assert any(s["new_in_b"] and s["key"].startswith("crash") for s in saved["signatures"])


def test_compare_of_a_command_that_cannot_start_is_inconclusive_not_a_stack_result(
        tmp_path: Path) -> None:
    res = run_cli("compare", "calm", "crashy", "--stacks", str(write_stacks(tmp_path / "s.toml")),
                  "--engine", "exec", "-n", "2", "--results", str(tmp_path / "cmp"),
                  "--", str(tmp_path / "no-such-test"), timeout=120, cwd=tmp_path)
    assert res.rc == 3, res.stdout + res.stderr[-3000:]
    head, _, answer = res.stdout.partition("\n\n")
    assert answer.startswith("VERDICT  inconclusive"), res.stdout
    assert head.startswith("iree-stress: ") and "\nnot run: A calm, B crashy\n" in head
    assert "cannot start: the command" in res.stdout and "no-such-test" in res.stdout


def exec_gate(run: Path, flaky: Path, crash_pct: int, *extra: str) -> tuple[int, str]:
    """`gate --engine exec` on flaky.c at a crash percentage, decided by the failing-job rate
    alone (--fatal none: no new-signature shortcut); (exit code, text)."""
    res = run_cli("gate", "--engine", "exec", "--max-rate", "0.3", "--design-effect", "1",
                  "--fatal", "none", "--budget", "120s", "-q", "--results", str(run), *extra,
                  "--", str(flaky), "{seed}", str(crash_pct), "0", timeout=300,
                  cwd=run.parent)  # the command's cwd, where its cores land
    # the verdict line comes after the header that says what was tested
    return res.rc, res.stdout.partition("\n\n")[2] + res.stderr[-2000:]


def test_gate_passes_a_command_that_never_fails_and_fails_one_that_often_fails(
        tmp_path: Path, flaky: Path) -> None:
    rc, text = exec_gate(tmp_path / "never", flaky, 0, "--done-regex", "^done$")
    assert rc == 0 and text.startswith("GATE PASS"), text
    rc, text = exec_gate(tmp_path / "often", flaky, 90)
    assert rc == 1 and text.startswith("GATE FAIL"), text
    assert "crash SIGSEGV" in text and "teardown_crash" in text  # its frame, from the core


def test_gate_fails_a_command_that_often_crashes_after_its_work_is_done(
        tmp_path: Path, flaky: Path) -> None:
    rc, text = exec_gate(tmp_path / "often", flaky, 90, "--done-regex", "^done$")
    assert rc == 1 and text.startswith("GATE FAIL"), text


_PROBE = """#!/bin/sh
# a test from a ROCm tree: passes only when its own tree's libraries come first
case "$LD_LIBRARY_PATH" in "{lib}"*) exit {rc} ;; esac
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH is not this tree's" >&2
exit 2
"""


def fake_rocm_tree(root: Path, rc: int) -> Path:
    """An unpacked TheRock-like folder: lib/libamdhip64.so (what a stack binds) and a test
    tool in bin/ that exits `rc` when it runs with this tree's lib/ first."""
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "libamdhip64.so").write_bytes(b"")
    (root / "bin").mkdir()
    tool = root / "bin" / "rocm-selftest"
    tool.write_text(_PROBE.format(lib=root / "lib", rc=rc))
    tool.chmod(0o755)
    return root


def test_compare_runs_the_command_from_each_stack_s_rocm_tree_first_on_path_and_loader_path(
        tmp_path: Path) -> None:
    good, bad = fake_rocm_tree(tmp_path / "rocm-a", 0), fake_rocm_tree(tmp_path / "rocm-b", 1)
    stacks = tmp_path / "stacks.toml"
    stacks.write_text(f'[stacks.a]\nrocm = "{good}"\n\n[stacks.b]\nrocm = "{bad}"\n')
    out = tmp_path / "cmp"
    res = run_cli("compare", "a", "b", "--stacks", str(stacks), "--engine", "exec", "-n", "1",
                  "--seed", "1", "--results", str(out), "--", "rocm-selftest", timeout=300,
                  cwd=tmp_path)
    assert res.rc == 1, res.stdout + res.stderr[-3000:]
    assert res.stdout.partition("\n\n")[2].startswith("VERDICT  B worse  (A = a, B = b;")
    saved = json.loads((out / "compare.json").read_text())
    for trial in saved["per_trial"]:  # B's failures are its tool's exit 1, never the exit 2
        #   of a tool that ran with another tree's libraries
        db = sqlite3.connect(Path(trial["run_dir"]) / "stress.db")
        messages = [m for (m,) in db.execute("SELECT message FROM failures")]
        assert all("status 1 " in m for m in messages), messages
        assert bool(messages) == (trial["stack"] == "b")


def test_a_path_the_stack_sets_itself_is_used_as_written_and_the_tree_goes_first_otherwise(
        tmp_path: Path) -> None:
    from stress.runtimes import provision, spec

    tree = fake_rocm_tree(tmp_path / "rocm", 0)
    path = tmp_path / "stacks.toml"
    path.write_text(f'[stacks.own]\nrocm = "{tree}"\nenv = {{ LD_LIBRARY_PATH = "/mine" }}\n')
    built = provision.build(spec.load(path)["own"], tmp_path / "cache")
    env = provision.command_env(built, {"PATH": "/usr/bin"})
    assert env["LD_LIBRARY_PATH"] == "/mine"
    assert env["PATH"] == f"{tree / 'bin'}:/usr/bin"
    assert env[provision.ENV_HIP_DYLIB] == f"file:{tree / 'lib' / 'libamdhip64.so'}"
