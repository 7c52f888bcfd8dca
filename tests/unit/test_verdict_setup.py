"""stress/verdicts/setup.py and the stack start-up check (issue 38): what a trial recorded
that says the stack's setup, not the stack, failed; a start-up check killed only at its own
exit is no reason to stop."""

from __future__ import annotations

import sys
from pathlib import Path

from stress.runtimes import provision
from stress.runtimes.provision import Built
from stress.runtimes.spec import Stack
from stress.verdicts.setup import setup_problem
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


def test_every_exec_job_failing_on_one_missing_module_is_setup_but_a_real_failure_is_not(
        ) -> None:
    missing = "failed||run|||<path>: No module named pytest"
    assert "No module named pytest" in setup_problem(Engine.EXEC, summary([missing], 3, 3),
                                                     "a", "")
    assert setup_problem(Engine.EXEC, summary([missing], 3, 1), "a", "") == ""  # others ran
    assert setup_problem(Engine.EXEC, summary(["crash|SIGSEGV|run"], 3, 3), "a", "") == ""


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


def test_a_console_script_of_an_interpreter_outside_the_stack_is_refused_one_inside_is_not(
        tmp_path: Path) -> None:
    from stress.soak.options import SoakOptions
    from stress.verdicts.setup import exec_preflight

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    outside = tmp_path / "elsewhere" / "pytest"  # what PATH finds when the venv has no pytest
    outside.parent.mkdir()
    for script, interpreter in ((outside, "/usr/bin/python3"),
                                (venv / "bin" / "tool", str(venv / "bin" / "python"))):
        script.write_text(f"#!{interpreter}\nimport sys\n")
        script.chmod(0o755)
    built = Built(Stack("lean"), str(venv / "bin" / "python"), {}, venv=str(venv))
    base = SoakOptions(None, None, 1, 1, [], [], [], None, 1, None, {}, None, None, 30.0, 15.0,
                       5, [], None, (0, 1), None, tmp_path, 1, False, engine="exec",
                       command=[str(outside), "-q"], cwd=tmp_path)
    why = exec_preflight(built, base)
    assert why.startswith(f"the command '{outside}' is {outside}, a script of /usr/bin/python3,"
                          f" outside stack lean's venv"), why
    base.command = [str(venv / "bin" / "tool")]
    assert exec_preflight(built, base) == ""
