"""The session's processes: ids and generations, the runner each one is launched by (the fork
server for exit-family jobs, spawn where forking is unusable: that fallback decided here, once),
the restart window and what retiring a worker leaves behind.

The pool decides (may this worker be replaced? is a successor due?); the session launches.
"""

from __future__ import annotations

import sys
import time
from collections import Counter, deque
from collections.abc import Callable

from stress.engine.forkclient import ForkServerDown, ForkServerUnsafe
from stress.engine.workermanage import LaunchSpec, Runner, SpawnRunner, WorkerHandle

RESTART_WINDOW_S: float = 60.0  # --max-worker-restarts counts restarts within this window


class RestartWindow:
    """At most `limit` restarts (or one-job processes that could not start) within
    RESTART_WINDOW_S: a long soak of a crashy stack goes on, a restart storm stops it (a stack
    whose workers cannot start would otherwise relaunch the same job forever)."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic,
                 window_s: float = RESTART_WINDOW_S):
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self.times: deque[float] = deque()

    def allow(self) -> bool:
        """Counts one more restart; False (nothing counted) when the window is full."""
        now = self.clock()
        while self.times and now - self.times[0] > self.window_s:
            self.times.popleft()
        if len(self.times) >= self.limit:
            return False
        self.times.append(now)
        return True

    def describe(self) -> str:
        """The stop reason once the window is full."""
        return f"more than {self.limit} worker restarts within {self.window_s:g} s"


class WorkerPool:
    """Every live worker by id, the workers that survived SIGKILL, and the runners."""

    def __init__(self, runner: Runner, fork_runner: Callable[[], Runner],
                 on_runner_change: Callable[[], None]):
        self.runner = runner
        self.fork_runner = fork_runner  # raises ForkServerUnsafe/Down when it cannot start
        self.on_runner_change = on_runner_change  # (the manifest names the exit runner)
        self.exit_runner: Runner | None = None  # the fork server, started on first need
        self.exit_runner_note = ""
        self.workers: dict[int, WorkerHandle] = {}
        self.unreaped: list[WorkerHandle] = []  # survived SIGKILL (D state): polled each tick
        self.next_worker_id = 0
        self.generation: Counter[int] = Counter()
        self.pool_started = 0  # pool workers given a job limit (the first ones stagger theirs)

    def new_id(self) -> int:
        wid = self.next_worker_id
        self.next_worker_id += 1
        return wid

    def next_generation(self, wid: int) -> int:
        gen = self.generation[wid]
        self.generation[wid] += 1
        return gen

    def job_limit(self, per_worker: int, workers: int) -> int:
        """--max-jobs-per-worker for the next pool worker, staggered for the first ones (k of
        W gets (k+1)/W of it), so that they do not all retire, and restart, at once."""
        k = self.pool_started
        self.pool_started += 1
        if k < workers:
            return max(1, per_worker * (k + 1) // workers)
        return per_worker

    def _fall_back(self, exc: Exception) -> Runner:
        """Spawn for exit paths from now on (said once, on stderr and in the manifest)."""
        if self.exit_runner is not None:
            self.exit_runner.close()
        self.exit_runner = SpawnRunner()
        self.exit_runner_note = f"spawn (fork server unusable: {exc})"
        sys.stderr.write(f"iree-stress: exit paths use spawn: {exc}\n")
        return self.exit_runner

    def _exit_runner(self) -> Runner:
        if self.exit_runner is not None:
            return self.exit_runner
        try:
            runner = self.exit_runner = self.fork_runner()
            self.exit_runner_note = "fork-server"
        except (ForkServerUnsafe, ForkServerDown) as exc:
            runner = self._fall_back(exc)
        self.on_runner_change()
        return runner

    def launch(self, spec: LaunchSpec, exit_job: bool) -> WorkerHandle:
        """Starts one process (not yet in `workers`: the session registers it)."""
        runner = self._exit_runner() if exit_job else self.runner
        try:
            return runner.launch(spec)
        except (ForkServerDown, ForkServerUnsafe) as exc:  # restarted by the runner; else spawn
            h = self._fall_back(exc).launch(spec)
            self.on_runner_change()
            return h

    def replace(self, h: WorkerHandle, window: RestartWindow, stopping: bool) -> bool | None:
        """Whether a dead pool worker gets a successor on its id: True (removed here, the
        caller launches), False (a one-job process, or the run is stopping), None (the restart
        window is full: the run stops). A retiree is replaced whatever the window says."""
        if h.ephemeral or stopping:
            return False
        if not h.retiring and not window.allow():
            return None
        self.workers.pop(h.worker_id, None)
        return True

    def retire(self, h: WorkerHandle, stopping: bool) -> bool:
        """Closes a worker that ended; True when a successor is due on its id (it had had all
        its jobs, --max-jobs-per-worker, and the run goes on)."""
        h.close()
        successor = False
        if self.workers.get(h.worker_id) is h:
            del self.workers[h.worker_id]
            successor = h.retiring and not stopping  # same worker id, same device
        if h.unkillable:
            self.unreaped.append(h)
        return successor

    def close(self) -> None:
        self.runner.close()
        if self.exit_runner is not None:
            self.exit_runner.close()
