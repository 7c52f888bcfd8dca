from __future__ import annotations

from pathlib import Path

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


# ---- issue 28 (item 6): option names reviewed as a set ------------------------------------
from stress.cli import cli  # noqa: E402
from stress.options import RENAMED, AliasedOption  # noqa: E402


def commands() -> list[click.Command]:
    return list(cli.commands.values())  # type: ignore[attr-defined]


def options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option)]


def shown_names(cmd: click.Command) -> list[str]:
    ctx = click.Context(cmd)
    names = []
    for opt in options(cmd):
        aliases = opt.aliases if isinstance(opt, AliasedOption) else ()
        if not opt.hidden:
            names += [o for o in opt.opts + opt.secondary_opts if o not in aliases]
        record = opt.get_help_record(ctx)
        if record is not None:
            listed = {t for t in record[0].replace(",", " ").replace("/", " ").split()
                      if t.startswith("-")}
            assert not listed & set(aliases), (cmd.name, record[0])
    return names


def test_every_option_of_every_command_has_help_text_hidden_ones_included() -> None:
    missing = [f"{cmd.name} {opt.opts[0]}" for cmd in commands() for opt in options(cmd)
               if not (opt.help or "").strip()]
    assert missing == []


def test_no_command_has_two_options_told_apart_only_by_case_or_a_plural() -> None:
    for cmd in commands():
        names = shown_names(cmd)
        assert len(names) == len(set(names)), cmd.name
        short = [n for n in names if not n.startswith("--")]
        assert len({n.lower() for n in short}) == len(short), (cmd.name, short)  # -p/-P
        longs = set(n for n in names if n.startswith("--"))
        assert not [n for n in longs if n + "s" in longs], cmd.name  # --program/--programs


def test_a_short_option_means_one_thing_in_every_command() -> None:
    meaning: dict[str, str] = {}
    for cmd in commands():
        ctx = click.Context(cmd)
        for opt in options(cmd):
            aliases = opt.aliases if isinstance(opt, AliasedOption) else ()
            if opt.hidden or opt.get_help_record(ctx) is None:
                continue
            longs = [o for o in opt.opts if o.startswith("--") and o not in aliases]
            for short in (o for o in opt.opts if not o.startswith("--") and o not in aliases):
                assert meaning.setdefault(short, longs[0]) == longs[0], (cmd.name, short)


@pytest.mark.parametrize("command,old,new,value", [
    ("soak", ["-p", "unary.*"], ["--programs", "unary.*"], ("unary.*",)),
    ("soak", ["-P", "shared"], ["--patterns", "shared"], ("shared",)),
    ("soak", ["--program", "a.mlir"], ["--mlir", "a.mlir"], ("a.mlir",)),
    ("soak", ["-j", "3"], ["--compilers", "3"], 3),
    ("soak", ["--jobs", "3"], ["--compilers", "3"], 3),
    ("soak", ["--parallel", "4"], ["--workers", "4"], 4),
    ("gate", ["--budget", "90s"], ["--duration", "90s"], 90.0),
    ("repro", ["-n", "5", "F"], ["--times", "5", "F"], 5),
    ("compile", ["-j", "1"], ["--compilers", "1"], 1),
])
def test_old_spellings_still_parse_as_hidden_aliases_of_the_new_names(
        command: str, old: list[str], new: list[str], value: object) -> None:
    cmd = cli.commands[command]  # type: ignore[attr-defined]
    a = cmd.make_context(command, list(old), resilient_parsing=True).params
    b = cmd.make_context(command, list(new), resilient_parsing=True).params
    changed = {k for k in a if a[k] != b[k]}
    assert changed == set()
    assert value in a.values()
    assert old[0] not in shown_names(cmd)


def test_renamed_options_are_the_ones_docs_soak_md_lists() -> None:
    from tests.conftest import REPO

    text = (REPO / "docs" / "soak.md").read_text()
    for new, olds in RENAMED.items():
        for old in olds:
            assert f"`{old}`" in text and f"`{new}" in text, (old, new)


def _all_option_names() -> set[str]:
    names: set[str] = {"--help"}
    for cmd in [cli, *commands()]:  # the group's own (--version) too
        for opt in options(cmd):
            names.update(opt.opts + opt.secondary_opts)
    return names


def test_every_option_a_usage_error_names_is_one_the_command_line_has() -> None:
    """A hint to an option that does not exist is a second error (`iree-compile not found:
    ... or pass --compiler PATH` named an option no command ever had). iree-compile's own
    flags (--iree-*) are the compiler's."""
    import ast
    import re

    from tests.conftest import REPO

    raising = {"UsageError", "BadParameter", "ClickException"}
    known = _all_option_names()
    wrong = []
    for path in sorted((REPO / "stress").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name not in raising:
                continue
            text = " ".join(c.value for c in ast.walk(node)
                            if isinstance(c, ast.Constant) and isinstance(c.value, str))
            wrong += [f"{path.relative_to(REPO)}:{node.lineno} {o}" for o in
                      re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text)
                      if o not in known and not o.startswith("--iree-")]
    assert wrong == []


def test_no_compiler_here_says_what_to_do_with_options_that_exist(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stress.errors import UsageError
    from stress.programs import compiler

    (tmp_path / "bin").mkdir()
    monkeypatch.setattr("sys.executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(UsageError) as err:
        compiler.find_compiler()
    said = str(err.value)
    assert "pip install iree-base-compiler" in said and "--artifacts DIR" in said
    assert "--compiler" not in said


# ---- issue 38: compare and bisect refuse an engine/command mismatch as a usage error -------
@pytest.mark.parametrize("verb", [["compare", "a", "b", "--trials", "1"],
                                  ["bisect", "--good", "a", "--bad", "b"]])
@pytest.mark.parametrize(("args", "said"), [
    (["--engine", "exec"], "--engine exec needs a command after `--`"),
    (["--", "true"], "a command after `--` runs only with --engine exec"),
    (["--engine", "exec", "--done-regex", "(", "--", "true"], "--done-regex '(': missing )"),
])
def test_compare_and_bisect_say_a_command_and_engine_mismatch_in_one_line_with_exit_2(
        tmp_path: Path, verb: list[str], args: list[str], said: str) -> None:
    """Found only in a stack's first trial, each was an inconclusive verdict (exit 3) with a
    whole posterior table."""
    from tests.conftest import run_cli

    stacks = tmp_path / "s.toml"
    stacks.write_text('[stacks.a]\n\n[stacks.b]\nenv = { X = "1" }\n')
    res = run_cli(*verb, "--stacks", str(stacks), "-n", "1", "--results",
                  str(tmp_path / "out"), *args, cwd=tmp_path)
    assert (res.rc, res.stdout) == (2, ""), res.stdout + res.stderr
    assert res.stderr.startswith(f"iree-stress: error: {said}") and \
        res.stderr.count("\n") == 1, res.stderr
    assert not (tmp_path / "out").exists()
