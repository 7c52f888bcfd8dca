"""Content-addressed artifact cache: key = program text + compile argv + compiler version.

Writes are atomic (temp file in the same folder, then rename), so concurrent runs sharing a
cache never see a torn .vmfb; a warm cache runs no compiler process at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.errors import UsageError
from stress.programs import compiler
from stress.programs.program import Program
from stress.programs.targets import Target

ENV_CACHE_DIR = "IREE_STRESS_CACHE"


def default_cache_dir() -> Path:
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "iree-stress"


def atomic_write(path: Path, data: bytes) -> None:
    """Writes `data` to `path` so that readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return Artifact(program, target, out, key, cached=False)

    def compile_all(self, programs: list[Program], target: Target, jobs: int = 1,
                    extra: tuple[str, ...] = (),
                    on_done: Callable[[str, Artifact | None], None] | None = None,
                    ) -> CompileReport:
        """Compiles every program (in parallel, `jobs` compiler processes); failures don't stop
        the batch and are returned in `errors`."""
        report = CompileReport(compiler_version=self.info.version)

        def one(p: Program) -> tuple[Program, Artifact | None, compiler.CompileError | None]:
            try:
                return p, self.get_or_compile(p, target, extra), None
            except compiler.CompileError as exc:
                return p, None, exc

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for prog, art, err in pool.map(one, programs):
                if art is not None:
                    report.artifacts[prog.name] = art
                    if art.cached:
                        report.cached += 1
                    else:
                        report.compiled += 1
                if err is not None:
                    report.errors.append(err)
                if on_done:
                    on_done(prog.name, art)
        return report
