"""The shape of the package (issue 25, docs/architecture.md), read from the code's own imports:
no module over 500 lines, no import circle, and no import back up the stage order
(programs -> engine -> store -> analysis -> soak -> verdicts -> the CLI)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.architecture import (
    MAX_LINES,
    PACKAGE,
    STAGES,
    arrows_up,
    circles,
    graph,
    imports,
    modules,
    sizes,
    stage,
)


def test_no_module_is_over_500_lines() -> None:
    long = {name: n for name, n in sizes().items() if n > MAX_LINES}
    assert not long, f"split these (shared/STYLE.md): {long}"


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert circles(graph()) == []


def test_no_import_runs_back_up_the_stage_order() -> None:
    g = graph()
    assert {stage(m) for m in g} <= set(STAGES), "a new stage: give it its rank in STAGES"
    up = arrows_up(g)
    assert not up, up


def test_the_checks_see_a_circle_and_an_arrow_up() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert arrows_up({"stress.engine.x": {"stress.store.db", "stress.vocab"},
                      "stress.store.db": {"stress.engine.x"}}) == [
        "stress.engine.x -> stress.store.db"]


def test_imports_are_read_late_relative_and_from_a_package(tmp_path: Path) -> None:
    pkg = tmp_path / "stress"
    (pkg / "engine").mkdir(parents=True)
    for name in ("__init__", "vocab", "engine/__init__", "engine/a", "engine/b"):
        (pkg / f"{name}.py").write_text("")
    (pkg / "engine" / "a.py").write_text(
        "from . import b\nfrom .. import vocab\n"
        "def f():\n    from stress.engine import b\n")
    known = modules(pkg)
    assert imports("stress.engine.a", pkg / "engine" / "a.py", known) == {
        "stress.engine.b", "stress.vocab"}
    assert imports("stress.x", PACKAGE / "cli.py", modules()) >= {"stress.soak.run"}
