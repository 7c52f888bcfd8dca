"""Content-addressed artifact cache: key = program text + compile argv + compiler version.

Writes are atomic (temp file in the same folder, then rename), so concurrent runs sharing a
cache never see a torn .vmfb; a warm cache runs no compiler process at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.errors import UsageError
from stress.fs import atomic_write, new_file_mode
from stress.programs import compiler
from stress.programs.program import Program
from stress.programs.targets import Target
from stress.ui import Status, duration_text, eta

_STATUS_WAKE_S: float = 0.5  # how often a compile's status line may move while none finishes
_NAMES_ROOM: int = 160  # characters of failed programs' names a one-line error lists at most


@dataclass
class Artifact:
    program: Program
    target: Target
    path: Path
    key: str
    cached: bool


@dataclass
class CompileReport:
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    errors: list[compiler.CompileError] = field(default_factory=list)
    compiled: int = 0
    cached: int = 0
    compiler_version: str = ""

    def failure_line(self, target: str, hint: str) -> str:
        """What a failed compile is to a user, one line, said alike by soak, compile, programs
        and compare: how many programs failed, the first one's first diagnostic in the user's
        own file and line (`bad.mlir:2:23: error: ...`, never the cache's copy), the names of
        the others, and `hint` (`rerun_hint(...)`: the command that shows each in full)."""
        first, rest = self.errors[0], [e.program for e in self.errors[1:]]
        names = ""
        if rest:
            shown: list[str] = []
            for name in rest:  # (all of them when they fit; a corpus-wide failure is cut)
                if shown and sum(len(n) + 2 for n in shown) + len(name) > _NAMES_ROOM:
                    break
                shown.append(name)
            cut = f", ... ({len(rest) - len(shown)} not named)" if len(shown) < len(rest) else ""
            names = f"; and {len(rest)} more: {', '.join(shown)}{cut}"
        return (f"{len(self.errors)} program(s) failed to compile for {target}: "
                f"{first.one_line()}{names} ({hint})")


def rerun_hint(target: str, programs: Sequence[str], program_files: Sequence[str],
               compiler: str = "") -> str:
    """`iree-stress compile --verbose` for the same target and programs, which shows every
    failure of a compile with its diagnostics and command line (`programs` the user's
    --programs globs, `program_files` the --mlir files as the user gave them; `compiler` a
    runtime stack's own iree-compile, which the tool's compile does not use)."""
    argv = ["iree-stress", "compile", "--verbose", "--target", target]
    for glob in programs:
        argv += ["--programs", glob]
    for file in program_files:
        argv += ["--mlir", str(file)]
    instead = f" with {compiler} in place of the tool's iree-compile" if compiler else ""
    return f"`{shlex.join(argv)}`{instead} shows each in full"


EXPORT_MANIFEST = "artifacts.json"


def export(report: CompileReport, dest: Path) -> Path:
    """Writes the compiled artifacts as a self-describing folder (`soak --artifacts DIR`): for
    machines without a compiler, and for runtime stacks that need a given compiler's output."""
    dest.mkdir(parents=True, exist_ok=True)
    entries = {}
    for name, art in sorted(report.artifacts.items()):
        file = f"{art.key[:16]}.vmfb"
        atomic_write(dest / file, art.path.read_bytes())
        entries[name] = {"file": file, "program": art.program.to_dict()}
    target = next(iter(report.artifacts.values())).target.name if report.artifacts else ""
    manifest = {"compiler": report.compiler_version, "target": target, "programs": entries}
    atomic_write(dest / EXPORT_MANIFEST, json.dumps(manifest, indent=1).encode())
    return dest / EXPORT_MANIFEST


def load_export(src: Path) -> tuple[dict[str, Any], dict[str, tuple[Program, Path]]]:
    """(manifest, name -> (program, vmfb path)) of an exported artifacts folder."""
    try:
        manifest = json.loads((src / EXPORT_MANIFEST).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{src} is not an exported artifacts folder ({EXPORT_MANIFEST}: "
                         f"{exc})") from None
    out = {name: (Program.from_dict(e["program"]), src / e["file"])
           for name, e in manifest["programs"].items()}
    return manifest, out


class ArtifactCache:
    def __init__(self, root: Path, compiler_path: str | None = None):
        self.root = root
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = root / f".probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise UsageError(f"cache dir {root} is not writable: {exc.strerror}") from None
        self.compiler_path = compiler.find_compiler(compiler_path)
        self.info = compiler.info(self.compiler_path)

    def key(self, program: Program, target: Target, extra: tuple[str, ...] = ()) -> str:
        argv = self.argv(program, target, Path("SRC"), Path("OUT"), extra)
        blob = json.dumps([program.mlir, compiler.cache_argv(argv), self.info.version])
        return hashlib.sha256(blob.encode()).hexdigest()

    def argv(self, program: Program, target: Target, source: Path, output: Path,
             extra: tuple[str, ...] = ()) -> list[str]:
        return compiler.build_compile_argv(self.compiler_path, program, target,
                                           self.info.option_names, source, output, extra)

    def path_for(self, key: str) -> Path:
        return self.root / "vmfb" / key[:2] / f"{key}.vmfb"

    def get_or_compile(self, program: Program, target: Target,
                       extra: tuple[str, ...] = ()) -> Artifact:
        key = self.key(program, target, extra)
        out = self.path_for(key)
        if out.exists():
            try:
                os.utime(out)  # its last use: `iree-stress clean --cache` goes by it
            except OSError:
                pass  # a cache shared read-only
            return Artifact(program, target, out, key, cached=True)
        src = self.root / "src" / f"{hashlib.sha256(program.mlir.encode()).hexdigest()}.mlir"
        if not src.exists():
            atomic_write(src, program.mlir.encode())
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".vmfb", dir=out.parent)
        os.close(fd)
        try:
            argv = self.argv(program, target, src, Path(tmp), extra)
            compiler.run_compile(program, argv)
            meta = {"program": program.name, "target": target.name, "argv": argv,
                    "compiler": self.info.version}
            atomic_write(out.with_suffix(".json"), json.dumps(meta, indent=1).encode())
            os.chmod(tmp, new_file_mode())  # (mkstemp made it 0600)
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return Artifact(program, target, out, key, cached=False)

    def is_cached(self, program: Program, target: Target, extra: tuple[str, ...] = ()) -> bool:
        return self.path_for(self.key(program, target, extra)).exists()

    def compile_all(self, programs: list[Program], target: Target, jobs: int = 1,
                    extra: tuple[str, ...] = (),
                    on_done: Callable[[str, Artifact | None], None] | None = None,
                    status: Status | None = None) -> CompileReport:
        """Compiles every program (in parallel, `jobs` compiler processes); failures don't stop
        the batch and are returned in `errors`. `status` shows the count done and the time
        left while the compiler runs (nothing for a warm cache). An interrupt (Ctrl-C) stops
        the compiles not yet begun and is raised at once."""
        report = CompileReport(compiler_version=self.info.version)
        cold = [p for p in programs if not self.is_cached(p, target, extra)]
        done: dict[str, tuple[Artifact | None, compiler.CompileError | None]] = {}
        started = time.monotonic()

        def one(p: Program) -> tuple[Program, Artifact | None, compiler.CompileError | None]:
            try:
                return p, self.get_or_compile(p, target, extra), None
            except compiler.CompileError as exc:
                return p, None, exc

        def show(force: bool = False) -> None:
            if status is not None and cold:
                compiled = sum(1 for p in cold if p.name in done)
                elapsed = time.monotonic() - started
                left = eta(compiled, len(cold), elapsed)
                warm = len(programs) - len(cold)
                status.update(f"compiling for {target.name}: {compiled}/{len(cold)} programs"
                              f"{f' ({warm} cached)' if warm else ''}, "
                              f"{duration_text(elapsed)}{', ' + left if left else ''}",
                              force=force)

        show(force=True)
        pool = ThreadPoolExecutor(max_workers=max(1, jobs))
        try:
            pending = {pool.submit(one, p) for p in programs}
            while pending:  # (woken at least every _STATUS_WAKE_S: the elapsed time moves)
                finished, pending = wait(pending, timeout=_STATUS_WAKE_S,
                                         return_when=FIRST_COMPLETED)
                for fut in finished:
                    prog, art, err = fut.result()
                    done[prog.name] = (art, err)
                    if on_done:
                        on_done(prog.name, art)
                show()
        except BaseException:  # Ctrl-C: compiles not begun never start, running ones end
            pool.shutdown(wait=False, cancel_futures=True)
            compiler.stop_all()
            raise
        pool.shutdown()
        if status is not None and cold:
            failed = sum(1 for art, _ in done.values() if art is None)
            status.done(f"compiled {len(cold) - failed}/{len(cold)} program(s) for "
                        f"{target.name} in {duration_text(time.monotonic() - started)}"
                        f"{f' ({failed} failed)' if failed else ''}")
        for prog in programs:
            art, err = done[prog.name]
            if art is not None:
                report.artifacts[prog.name] = art
                if art.cached:
                    report.cached += 1
                else:
                    report.compiled += 1
            if err is not None:
                report.errors.append(err)
        return report
