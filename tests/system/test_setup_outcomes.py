"""A stack's setup is never a verdict (issue 38): a command that cannot run *in* a stack, an
interpreter or runtime from outside it, a start-up check killed at exit by the very fault
being hunted, and Ctrl-C are each said in one line with exit 3 (or, for the check, not at
all): never `no difference shown`, never a stack blamed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import REPO, TEST_CACHE, run_cli
from tests.helpers.stacks import venv_stack
from tests.helpers.waits import wait_until

pytestmark = pytest.mark.system

_BLAMES = ("VERDICT  B worse", "VERDICT  A worse", "no difference shown", "BISECT  found",
           "is --good really good", "is --bad really bad")


@pytest.fixture(scope="module")
def lean_and_full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`lean`: a stack with its own venv and nothing a test needs in it (no pytest, a stand-in
    iree.runtime); `full`: the tool's own interpreter (pytest and the real runtime)."""
    folder = tmp_path_factory.mktemp("stacks")
    # the wheels folder is shared (the venv is cached by the stack's requirements and name)
    path = folder / "stacks.toml"
    path.write_text(venv_stack("lean", TEST_CACHE / "stand-in-wheels") + "[stacks.full]\n")
    (folder / "test_ok.py").write_text("def test_ok() -> None:\n    assert True\n")
    return path


def answer_of(out: str) -> str:
    return out.partition("\n\n")[2]  # after the header that says what was tested


def assert_setup_outcome(rc: int, out: str, err: str, *words: str) -> None:
    assert rc == 3, out + err[-3000:]
    answer = answer_of(out)
    assert answer.startswith(("VERDICT  inconclusive", "BISECT  inconclusive")), out
    reason = answer.splitlines()[1] if answer.startswith("VERDICT") else answer.splitlines()[0]
    for word in words:
        assert word in reason, reason
    assert not any(b in out for b in _BLAMES), out


def test_a_stack_whose_interpreter_lacks_the_test_runner_is_inconclusive_in_one_line(
        lean_and_full: Path) -> None:
    res = run_cli("compare", "lean", "full", "--stacks", str(lean_and_full), "--engine", "exec",
                  "-n", "2", "--trials", "3", "--seed", "1", "--results",
                  str(lean_and_full.parent / "runner"), "--", "python", "-m", "pytest", "-q",
                  "test_ok.py", cwd=lean_and_full.parent)
    assert_setup_outcome(res.rc, res.stdout, res.stderr, "stack lean trial 0",
                         "has no module pytest", "add it to the stack's requirements")


def test_a_command_whose_interpreter_is_outside_the_stack_is_inconclusive_not_a_bad_end(
        lean_and_full: Path) -> None:
    res = run_cli("bisect", "--good", "lean", "--bad", "full", "--stacks", str(lean_and_full),
                  "--engine", "exec", "-n", "1", "--seed", "1", "--results",
                  str(lean_and_full.parent / "outside"), "--", sys.executable, "-c", "pass",
                  cwd=lean_and_full.parent)
    assert_setup_outcome(res.rc, res.stdout, res.stderr, "lean: cannot start:",
                         f"the command's interpreter {sys.executable} is not stack lean's")


def test_a_command_importing_another_runtime_than_the_stack_s_is_inconclusive(
        lean_and_full: Path) -> None:
    site = sysconfig.get_paths()["purelib"]  # the tool's own runtime, put first by the user
    res = run_cli("compare", "lean", "full", "--stacks", str(lean_and_full), "--engine", "exec",
                  "-n", "1", "--trials", "3", "--seed", "1", "--env", f"PYTHONPATH={site}",
                  "--results", str(lean_and_full.parent / "runtime"), "--", "python", "-c",
                  "pass", cwd=lean_and_full.parent)
    assert_setup_outcome(res.rc, res.stdout, res.stderr, "stack lean trial 0",
                         f"({site}/iree/runtime) is not stack lean's")


_KILL_AT_EXIT = """import atexit, os, signal
if os.environ.get("STRESS_TEST_KILL_AT_EXIT"):  # the fault under hunt: dies at its exit
    atexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))
"""


@pytest.mark.slow  # ~40 s: python-engine soaks whose workers die at exit
def test_a_start_up_check_killed_only_at_its_own_exit_does_not_stop_the_compare(
        tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(_KILL_AT_EXIT)
    stacks = tmp_path / "stacks.toml"
    stacks.write_text(f'[stacks.calm]\n\n[stacks.dying]\nenv = {{ PYTHONPATH = '
                      f'"{tmp_path / "site"}", STRESS_TEST_KILL_AT_EXIT = "1" }}\n')
    res = run_cli("compare", "calm", "dying", "--stacks", str(stacks), "-t", "cpu", "-w", "1",
                  "--threads", "1", "-n", "2", "-p", "unary.exp.f32*", "-P", "shared",
                  "--trials", "1", "--seed", "1", "--results", str(tmp_path / "out"))
    assert "cannot start" not in res.stdout, res.stdout
    assert res.rc in (0, 1) and answer_of(res.stdout).startswith("VERDICT  "), \
        res.stdout + res.stderr[-3000:]
    assert "dying trial 0 (seed 1): " in res.stderr  # its trial ran


@pytest.mark.parametrize("verb", ["compare", "bisect"])
def test_ctrl_c_during_a_trial_is_an_interruption_in_one_line_not_a_stack_result(
        tmp_path: Path, verb: str) -> None:
    stacks = tmp_path / "stacks.toml"
    stacks.write_text("[stacks.a]\n\n[stacks.b]\nenv = { X = \"1\" }\n")
    started = tmp_path / "started"
    which = ["a", "b"] if verb == "compare" else ["--good", "a", "--bad", "b"]
    env = {**os.environ, "IREE_STRESS_CACHE": str(TEST_CACHE), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(  # its own session, as a terminal's foreground job: Ctrl-C goes
        #   to the group
        [sys.executable, "-m", "stress", verb, *which, "--stacks", str(stacks), "--engine",
         "exec", "-n", "1", "--seed", "1", "--results", str(tmp_path / "out"), "-q", "--",
         "sh", "-c", 'touch "$0"; sleep 120', str(started)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path, start_new_session=True)
    try:
        assert wait_until(started.exists, 120), "the command never started"
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert_setup_outcome(proc.returncode, out, err, "trial 0: interrupted by SIGINT: not a result",
                         "rerun the same command to resume")
    assert "no worker reported" not in out and "ran no job" not in out


@pytest.mark.slow
def test_a_runtime_that_cannot_load_the_programs_says_the_stack_needs_its_compiler(
        tmp_path: Path) -> None:
    """Runtime 3.11 from the package index against programs of the tool's compiler (3.13):
    every 3.11 job fails at module-load (NOT_FOUND; required module); that is the stack's
    setup, not its result (before: `no difference shown`, exit 0, or a blamed good end).
    Builds the stacks' venvs into the test cache once."""
    stacks = tmp_path / "stacks.toml"
    stacks.write_text('[stacks."iree-3.11"]\nrequirements = ["iree-base-runtime==3.11.0", '
                      '"numpy"]\n\n[stacks."iree-3.13"]\nrequirements = '
                      '["iree-base-runtime==3.13.0", "numpy"]\n')
    res = run_cli("compare", "iree-3.11", "iree-3.13", "--stacks", str(stacks), "-t", "cpu",
                  "-w", "1", "--threads", "1", "-n", "2", "-p", "unary.exp.f32*", "-P",
                  "shared", "--trials", "3", "--seed", "1", "--results", str(tmp_path / "out"),
                  timeout=1800)
    assert_setup_outcome(res.rc, res.stdout, res.stderr, "stack iree-3.11 trial 0",
                         "NOT_FOUND; required module",
                         'the stack needs `compiler = "3.11.0"`')
