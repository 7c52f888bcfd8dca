"""stress/verdicts/setup.py and the stack start-up check (issue 38): what a trial recorded
that says the stack's setup, not the stack, failed; a start-up check killed only at its own
exit is no reason to stop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stress.runtimes import provision
from stress.runtimes.provision import Built
from stress.runtimes.spec import Stack
from stress.soak.options import SoakOptions
from stress.verdicts.setup import exec_preflight, setup_problem
from stress.vocab import Engine

# what runtime 3.11 recorded for a module of compiler 3.13 (a real run's signature, cut
#   where the signature key cuts it)
_NOT_LOADABLE = ("error||module-load|||InvocationError: Error creating vm context with modules: "
                 "c/runtime/src/iree/vm/context.c:#: NOT_FOUND; required module '")


def summary(keys: list[str], jobs: int, failed: int, status: str = "completed",
            stop: str = "") -> dict[str, object]:
    return {"status": status, "stop_reason": stop, "jobs": jobs,
            "failures": {"error": 0, "failed": failed},
            "signatures": [{"key": k, "description": k} for k in keys]}


def test_programs_the_runtime_cannot_load_name_the_compiler_the_stack_needs() -> None:
    why = setup_problem(Engine.PYTHON, summary([_NOT_LOADABLE], 4, 4), "iree-3.11", "3.11.0")
    assert why.startswith("stack iree-3.11's runtime cannot load the programs (NOT_FOUND; "
                          "required module): ")
    assert why.endswith('the stack needs `compiler = "3.11.0"`')


def test_programs_the_runtime_cannot_load_name_no_compiler_pin_where_none_would_fix_it() -> None:
    """Under --engine exec the programs are the command's own (a stack's `compiler` makes only
    our corpus's); a stack that already pins its runtime's compiler has no pin to add."""
    failed = summary([_NOT_LOADABLE], 4, 4)
    why = setup_problem(Engine.EXEC, failed, "iree-3.11", "3.11.0")
    assert why.startswith("under stack iree-3.11 the command's runtime cannot load its "
                          "programs (NOT_FOUND; required module): ")
    assert "compiler =" not in why and why.endswith("rebuild them with that runtime's compiler")
    why = setup_problem(Engine.PYTHON, failed, "iree-3.11", "3.11.0", "3.11.0")
    assert why == ("stack iree-3.11's runtime cannot load the programs of its own compiler "
                   "3.11.0 (NOT_FOUND; required module): its runtime and compiler pins do not "
                   "fit together")
    assert setup_problem(Engine.PYTHON, failed, "iree-3.11", "3.11.0", "3.13.0").endswith(
        'the stack needs `compiler = "3.11.0"`')


def test_every_exec_job_failing_on_one_missing_module_is_setup_but_a_real_failure_is_not(
        ) -> None:
    missing = "failed||run|||<path>: No module named pytest"
    assert "No module named pytest" in setup_problem(Engine.EXEC, summary([missing], 3, 3),
                                                     "a", "")
    assert setup_problem(Engine.EXEC, summary([missing], 3, 1), "a", "") == ""  # others ran
    assert setup_problem(Engine.EXEC, summary(["crash|SIGSEGV|run"], 3, 3), "a", "") == ""


def test_every_job_of_a_wrapped_command_failing_on_a_missing_module_is_setup_as_recorded(
        ) -> None:
    """`-- sh -c 'python -m pytest'` passes the start-up check (sh is no interpreter); what
    its soak recorded (a real exec trial's summary: each failure's own message says only how
    its worker ended) still shows the runner missing. It blamed the good end before."""
    recorded = summary(["failed||run|||relcache<path>: No module named pytest"], 2, 2)
    recorded["failures_detail"] = [
        {"message": f"worker w{i} exited with status 1 while running exec:sh:python -m pytest "
                    f"[exec] seed={i} n=1"} for i in range(2)]
    assert setup_problem(Engine.EXEC, recorded, "lean", "").startswith(
        "every job failed before any test ran: No module named pytest (the command's "
        "interpreter under stack lean lacks it")


def test_an_interrupted_soak_is_an_interruption_not_a_stack_result() -> None:
    why = setup_problem(Engine.PYTHON, summary([], 0, 0, "interrupted",
                                               "interrupted by SIGINT"), "a", "")
    assert why.startswith("interrupted by SIGINT: not a result; rerun the same command")


_DIE_AT_EXIT = """import atexit, os, signal
atexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))
"""


def test_a_start_up_check_killed_at_its_own_exit_passes_and_one_killed_before_says_so(
        tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_DIE_AT_EXIT)  # dies after the imports worked
    built = Built(Stack("dying"), sys.executable, {"PYTHONPATH": str(site)})
    assert provision.preflight(built, {}) == ""
    (site / "sitecustomize.py").write_text(  # dies before anything is imported
        "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    why = provision.preflight(built, {})
    assert why == (f"{sys.executable} was killed by SIGSEGV: nothing printed, before `import "
                   f"numpy, iree.runtime` finished")


def exec_options(folder: Path, command: list[str]) -> SoakOptions:
    return SoakOptions(None, None, 1, 1, [], [], [], None, 1, None, {}, None, None, 30.0, 15.0,
                       5, [], None, (0, 1), None, folder, 1, False, engine="exec",
                       command=command, cwd=folder)


def test_a_console_script_of_an_interpreter_outside_the_stack_is_refused_one_inside_is_not(
        tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    outside = tmp_path / "elsewhere" / "pytest"  # what PATH finds when the venv has no pytest
    outside.parent.mkdir()
    for script, interpreter in ((outside, "/usr/bin/python3"),
                                (venv / "bin" / "tool", str(venv / "bin" / "python"))):
        script.write_text(f"#!{interpreter}\nimport sys\n")
        script.chmod(0o755)
    built = Built(Stack("lean", ("iree-base-runtime==3.12.0",)),
                  str(venv / "bin" / "python"), {}, venv=str(venv))
    base = exec_options(tmp_path, [str(outside), "-q"])
    why = exec_preflight(built, base)
    assert why.startswith(f"the command '{outside}' is {outside}, a script of /usr/bin/python3,"
                          f" outside stack lean's venv"), why
    base.command = [str(venv / "bin" / "tool")]
    assert exec_preflight(built, base) == ""


def test_the_user_s_own_interpreter_runs_under_a_rocm_only_stack_not_under_one_pinning_iree(
        tmp_path: Path) -> None:
    """`stacks` without --iree-runtime writes stacks of TheRock wheels alone: the command
    brings its own IREE (its own venv's python, its PYTHONPATH); only a stack whose venv has
    a runtime of its own is bypassed by another interpreter."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    rocm_only = Stack("7.11.0a20251124", rocm_requirements=("rocm[libraries]==7.11.0a20251124",))
    own = exec_options(tmp_path, [sys.executable, "-m", "pytest", "-q"])
    built = Built(rocm_only, str(venv / "bin" / "python"), {},
                  ["rocm==7.11.0a20251124", "rocm-sdk-core==7.11.0a20251124"], str(venv))
    assert exec_preflight(built, own) == ""
    pinned = Built(Stack("iree-3.12", ("iree-base-runtime==3.12.0", "numpy")),
                   str(venv / "bin" / "python"), {}, ["iree-base-runtime==3.12.0"], str(venv))
    assert exec_preflight(pinned, own).startswith(
        f"the command's interpreter {sys.executable} is not stack iree-3.12's")
    lacking = exec_options(tmp_path, ["python", "-m", "no_such_runner_here"])
    assert exec_preflight(built, lacking).endswith(
        "add it to the stack's requirements, or start the command with your own "
        "interpreter's path (the stack pins no IREE runtime: the command brings its own)")


_STALL_AT_EXIT = """import atexit, os, threading
if os.environ.get("STRESS_TEST_STALL_AT_EXIT"):  # the fault under hunt: its exit never ends
    atexit.register(threading.Event().wait)
"""


def test_start_up_checks_stalled_only_at_their_own_exit_pass_without_waiting_out_their_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stack whose env preloads a fault that stalls at process exit (the seed's other shape)
    must not be refused as `cannot start: ... timed out` once its imports worked."""
    from stress.verdicts import setup

    monkeypatch.setattr(provision, "_PROBE_TIMEOUT_S", 10.0)
    monkeypatch.setattr(setup, "_PROBE_TIMEOUT_S", 10.0)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_STALL_AT_EXIT)
    env = {"PYTHONPATH": str(site), "STRESS_TEST_STALL_AT_EXIT": "1"}
    assert provision.preflight(Built(Stack("stalling"), sys.executable, env), {}) == ""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    built = Built(Stack("stalling", ("numpy",)), str(venv / "bin" / "python"), env,
                  ["numpy==2.0.0"], str(venv))
    assert exec_preflight(built, exec_options(tmp_path, ["python", "-m", "no_such_runner"])
                          ).startswith("stack stalling's interpreter")  # the probe answered


def test_the_stack_s_own_interpreter_named_through_another_path_to_its_venv_is_its_own(
        tmp_path: Path) -> None:
    """A cache folder reached through a link (the venv built under one path, the command
    naming another) is still the stack's venv; its bin/python, a link out of it, is never
    followed."""
    real = tmp_path / "disk" / "venv"
    (real / "bin").mkdir(parents=True)
    (real / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "cache").symlink_to(tmp_path / "disk")
    venv = tmp_path / "cache" / "venv"
    built = Built(Stack("pinned", ("iree-base-runtime==3.12.0",)), str(venv / "bin" / "python"),
                  {}, ["iree-base-runtime==3.12.0"], str(venv))
    assert exec_preflight(built, exec_options(tmp_path, [str(real / "bin" / "python"), "-c",
                                                         "pass"])) == ""
    assert exec_preflight(built, exec_options(tmp_path, [sys.executable, "-c", "pass"])
                          ).startswith(f"the command's interpreter {sys.executable} is not")
