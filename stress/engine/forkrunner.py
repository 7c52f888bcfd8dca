"""The Runner for exit-path jobs: processes forked by the fork server (stress.engine.forkserver)
instead of spawned, so each exposure of the exit path costs a fork, not an interpreter start-up
and the runtime's import. The server is restarted when it dies, within a budget."""

from __future__ import annotations

import os
from pathlib import Path

from stress.engine.forkclient import ForkServer, ForkServerDown
from stress.engine.forkserver import CHILD_MSG_FD
from stress.engine.workermanage import LaunchSpec, WorkerHandle

_SERVER_RESTARTS: int = 5  # a server that dies more often than this is a harness problem


class ForkRunner:
    name = "fork-server"

    def __init__(self, python: str, env: dict[str, str], run_dir: Path):
        """Starts the server now: raises ForkServerUnsafe (the server's fork check failed:
        a driver library loaded at import, a second thread) or ForkServerDown."""
        self.python, self.env = python, env
        self.cwd = run_dir.resolve()
        self.restarts = 0
        self.server = ForkServer.start(python, env, cwd=self.cwd)

    def launch(self, spec: LaunchSpec) -> WorkerHandle:
        journal, out_path, err_path, cwd = spec.paths()
        try:
            return self._launch(spec, journal, out_path, err_path, cwd)
        except ForkServerDown:
            if self.restarts >= _SERVER_RESTARTS:
                raise
            self.restarts += 1
            self.server.close()
            self.server = ForkServer.start(self.python, self.env, cwd=self.cwd)
            return self._launch(spec, journal, out_path, err_path, cwd)

    def _launch(self, spec: LaunchSpec, journal: Path, out_path: Path, err_path: Path,
                cwd: Path) -> WorkerHandle:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        stdin_r, stdin_w = os.pipe()
        try:
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                proc = self.server.fork(spec.worker_argv(journal, CHILD_MSG_FD, 0), write_fd,
                                        out.fileno(), err.fileno(), stdin_fd=stdin_r, cwd=cwd,
                                        env=spec.env)
        except BaseException:
            os.close(read_fd)
            os.close(stdin_w)
            raise
        finally:
            os.close(write_fd)
            os.close(stdin_r)
        h = WorkerHandle(spec.worker_id, spec.generation, proc, read_fd, journal, out_path,
                         err_path, spec.ephemeral)
        h.stdin, h.cwd = os.fdopen(stdin_w, "wb"), cwd
        return h

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        self.server.close()
