"""What a run writes for its workers and about itself: the workers' environment and their copy
of this package, one worker config per device, and the manifest (what was tested, where)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

from stress.engine import postmortem, telemetry
from stress.engine.config import SoakConfig
from stress.fs import atomic_write, sha256_file


def hip_library_identity(facts: dict[str, Any]) -> dict[str, Any]:
    """Which libamdhip64 the workers' hip driver loaded: the path it reports itself
    (dump_device_info), its sha256, and the HIP libraries the worker had mapped while the
    driver was alive (its own /proc maps). A trial's proof of the library it ran (compare,
    bisect); empty values where no hip driver ran."""
    path = telemetry.hip_library_path(facts.get("device_info"))
    digest = None
    if path:
        try:
            digest = sha256_file(path)
        except OSError:
            pass
    mapped = [p for p in facts.get("driver_libraries") or [] if "amdhip" in p]
    return {"hip_library": path, "hip_library_sha256": digest, "hip_library_mapped": mapped}


class RunFiles:
    """A run's worker files and manifest. Several devices (--device A,B or --gpus): workers
    spread over them by worker id, so a restarted worker keeps its GPU and each failure's GPU
    is its worker's."""

    def __init__(self, config: SoakConfig, run_dir: Path):
        self.cfg, self.run_dir = config, run_dir
        self.python = config.python or sys.executable
        self.config_path = run_dir / "worker-config.json"
        self.devices = [u for u in config.device_uri.split(",") if u] or [config.device_uri]
        self._env: dict[str, str] | None = None

    def worker_env(self) -> dict[str, str]:
        """Our environment, PYTHONPATH to this package *alone* (a folder holding only a link to
        it: the parent's site-packages, with its own iree.runtime and numpy, must not shadow a
        runtime stack's), then the user's --env. The same for every worker: built once."""
        if self._env is None:
            env = dict(os.environ)
            # under another interpreter (a stack's venv) our own PYTHONPATH could shadow its
            # packages: only the link to this package goes there
            inherited = env.get("PYTHONPATH") if not self.cfg.python else None
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.worker_path()), inherited)
                                                if p)
            env["PYTHONFAULTHANDLER"] = "1"
            env.update(self.cfg.env)
            self._env = env
        return self._env

    def worker_path(self) -> Path:
        """RUN_DIR/worker-path/stress: a copy of this package taken once, at the run's start
        (about 1 MiB, with its bytecode). Every worker of the run imports the code the parent
        runs, even when the checkout or the installed package changes under a long soak (a
        link to the live package gave a worker started after an update an ImportError on
        the H200: docs/gpu-runs.md)."""
        folder = self.run_dir.resolve() / "worker-path"
        copy = folder / "stress"
        if not copy.exists():
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".stress-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(Path(__file__).resolve().parents[1], tmp, symlinks=True)
            tmp.rename(copy)
        return folder

    def device_for(self, wid: int) -> str:
        return self.devices[wid % len(self.devices)]

    def config_for(self, wid: int) -> Path:
        """The worker config naming this worker's device (one file per device)."""
        if len(self.devices) == 1:
            return self.config_path
        return self.config_path.with_name(f"worker-config-{wid % len(self.devices)}.json")

    def write_worker_configs(self) -> None:
        for i, uri in enumerate(self.devices):
            cfg = {"driver": self.cfg.driver, "device_uri": uri,
                   "threads": self.cfg.threads, "seed": self.cfg.seed,
                   "inject": self.cfg.inject,
                   "programs": {p.name: {"program": p.to_dict(),
                                         "vmfb": str(self.cfg.artifacts[p.name]),
                                         "numerics": self.cfg.numerics_of(p).value}
                                for p in self.cfg.programs}}
            atomic_write(self.config_for(i), json.dumps(cfg).encode())

    def manifest(self, facts: dict[str, Any], telemetry_note: str = "",
                 exit_runner_note: str = "") -> dict[str, Any]:
        """What was tested, where: the runtime's `facts` (a worker's hello), the time line's
        and the exit runner's notes, the host, and the config."""
        from stress import __version__

        cpu = ""
        try:
            with open("/proc/cpuinfo") as f:
                cpu = next((line.split(":", 1)[1].strip() for line in f
                            if line.startswith("model name")), "")
        except OSError:
            pass
        return {"tool_version": __version__, "iree_compiler": self.cfg.compiler_version,
                "iree_runtime": facts.get("iree_runtime"),
                "iree_revisions": facts.get("iree_revisions"),
                "driver": self.cfg.driver, "device_uri": self.cfg.device_uri,
                "devices": facts.get("devices"), "device_info": facts.get("device_info"),
                "loaded_gpu_libraries": facts.get("loaded_gpu_libraries"),
                "library_hashes": library_hashes(facts.get("stack_libraries") or []),
                "devices_used": self.devices,
                **hip_library_identity(facts),
                "vulkan_icds": facts.get("vulkan_icds"),
                "telemetry": telemetry_note or None,
                "driver_error": facts.get("driver_error"),
                "worker_python": facts.get("python"), "worker_executable": self.python,
                "iree_runtime_path": facts.get("iree_runtime_path"),
                "exit_runner": exit_runner_note or None,
                "host": platform.node(), "kernel": platform.release(),
                "os": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
                "parent_python": sys.version.split()[0], "seed": self.cfg.seed,
                "core_pattern": list(postmortem.read_core_pattern()),
                "command": self.cfg.command, "config": self.cfg.as_dict()}


def library_hashes(paths: list[str]) -> dict[str, str]:
    """Path -> sha256 of the HIP, HSA and IREE runtime libraries a worker mapped
    (worker.stack_libraries); a file gone since is left out."""
    out = {}
    for p in paths:
        try:
            out[p] = sha256_file(p)
        except OSError:
            continue
    return out
