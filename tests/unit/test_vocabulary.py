"""A pattern name, engine kind, run status or stop reason has one home, stress/vocab.py: other
modules ask the vocabulary (its enums and the pattern registry), never compare strings
(issue 25). This reads every module's syntax tree for such comparisons."""

from __future__ import annotations

import ast
from pathlib import Path

from stress import vocab

_PACKAGE = Path(vocab.__file__).parent
_VOCABULARY_MODULES: frozenset[str] = frozenset({"stress/vocab.py"})
_ALLOWED: frozenset[str] = frozenset()  # modules still comparing strings: none

_WORDS: frozenset[str] = frozenset(
    [*vocab.PATTERNS, *(e.value for e in vocab.Engine), *(s.value for s in vocab.RunStatus)])
_STOP_PREFIXES: tuple[str, ...] = tuple(r.value for r in vocab.StopReason if r.value)


def _vocabulary_text(node: ast.AST, named: dict[str, str]) -> str | None:
    """The vocabulary word a node spells (a literal, or a module constant bound to one)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.Name) and node.id in named:
        text = named[node.id]
    else:
        return None
    if text in _WORDS or (text and text.startswith(_STOP_PREFIXES)):
        return text
    return None


def _spelled(node: ast.AST, named: dict[str, str]) -> list[str]:
    """Words in a compared operand: itself, or the items of a literal tuple, list or set."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [t for item in items for t in [_vocabulary_text(item, named)] if t is not None]


def _module_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to a vocabulary literal (`_PROCESS_PER_JOB = "process-..."`)."""
    out: dict[str, str] = {}
    for stmt in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign):
            targets, value = [stmt.target], stmt.value
        text = _vocabulary_text(value, {}) if value is not None else None
        if text is not None:
            out.update({t.id: text for t in targets if isinstance(t, ast.Name)})
    return out


def string_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, word) of every comparison of a vocabulary word as a string in `source`:
    ==, !=, in, not in, startswith/endswith, and match-case values."""
    tree = ast.parse(source)
    named = _module_constants(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                found += [(node.lineno, t) for t in _spelled(operand, named)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "endswith"):
            for arg in node.args:
                found += [(node.lineno, t) for t in _spelled(arg, named)]
        elif isinstance(node, ast.MatchValue):
            found += [(node.lineno, t) for t in _spelled(node.value, named)]
    return found


def _modules() -> dict[str, list[tuple[int, str]]]:
    root = _PACKAGE.parent
    return {str(p.relative_to(root)): string_comparisons(p.read_text())
            for p in sorted(_PACKAGE.rglob("*.py"))
            if str(p.relative_to(root)) not in _VOCABULARY_MODULES}


def test_no_module_compares_a_pattern_engine_status_or_stop_reason_as_a_string() -> None:
    found = {m: hits for m, hits in _modules().items() if hits and m not in _ALLOWED}
    assert not found, "compare through stress.vocab (enums, PATTERNS), not strings: " + "; ".join(
        f"{m}:{line} {word!r}" for m, hits in found.items() for line, word in hits)


def test_the_allowlist_names_only_modules_that_still_need_it() -> None:
    modules = _modules()
    stale = sorted(m for m in _ALLOWED if not modules.get(m))
    assert not stale, f"no string comparison left in {', '.join(stale)}: take it off _ALLOWED"


def test_the_check_sees_each_kind_of_string_comparison() -> None:
    source = '''
_PPJ = "process-per-job"
a = job.pattern == "shared"
b = engine != "python"
c = status in ("completed", "interrupted")
d = reason.startswith("duration reached")
e = job.pattern == _PPJ
f = name == "sharedx" or reason.startswith("lasted")
match kind:
    case "exec":
        pass
'''
    assert [w for _, w in string_comparisons(source)] == [
        "shared", "python", "completed", "interrupted", "duration reached", "process-per-job",
        "exec"]


def test_every_stored_stop_reason_text_has_its_kind() -> None:
    assert vocab.StopReason.of("duration reached; 3 queued job(s) not started") is \
        vocab.StopReason.DURATION
    assert vocab.StopReason.of("gate decided: PASS (rate below p0)") is vocab.StopReason.GATE
    assert vocab.StopReason.of("--max-failures 5 reached") is vocab.StopReason.MAX_FAILURES
    assert vocab.StopReason.of("") is vocab.StopReason.UNKNOWN
    assert vocab.StopReason.of(None) is vocab.StopReason.UNKNOWN
    for kind in vocab.StopReason:
        assert vocab.StopReason.of(kind.text("x")) is kind and kind.describe()


def test_the_registry_knows_every_pattern_the_engines_run() -> None:
    from stress.engine import exitpaths, native, worker
    from stress.engine.execrunner import EXEC_PATTERN

    assert set(worker.RUNS) == {*vocab.family(vocab.Family.CORE), *exitpaths.FAMILY,
                                *vocab.family(vocab.Family.DRIVER)}
    assert set(native.NATIVE_PATTERNS) == set(vocab.family(vocab.Family.NATIVE))
    assert vocab.family(vocab.Family.EXEC) == (EXEC_PATTERN,)
    for name, impl in worker.RUNS.items():
        assert vocab.PATTERNS[name].summary == impl.summary
