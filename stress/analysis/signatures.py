"""Failure signatures, the way crash reporters build them (Socorro's signature generation,
Sentry's grouping by meaningful frames): one failure mode = one signature, across workers,
threads, runs and driver versions.

Key = class, signal (crashes), step, busy/blocked (hangs), and the failing thread's first
meaningful frames: the thread is the one that failed (the crashing thread of a core file or
faulthandler dump, else the journal's failing thread by native tid); frames in
siglists/irrelevant.txt are skipped (libc wait and syscall wrappers, ffi trampolines, the
interpreter loop, our Python harness), everything above a signal handler frame
(siglists/signal_handler.txt) is dropped, frames in siglists/prefix.txt do not count toward
the TOP_FRAMES taken. Frames enter the key without addresses, lines or library versions. Errors
and miscompares have no stacks: their key is class, step and the message with numbers blanked.
A crash or hang of an exec job (the user's own command) without native frames keys on the last
lines of its output instead (the evidence's `output_key`, kept by the exec engine; for a Python
process that crashed, the top of its faulthandler dump), so two commands that die after
different assertions are two modes, not one "crash at run". A crash whose native stacks were
not read (past the evidence budget, its core lost) joins the mode read of its class, signal,
step and process instead (joins.py): sampling decides how much is read, not the grouping.
An exec job whose crash is a process of its group killed by a signal (`child_crash`: a
compiler the test ran) keys on that process's frames like any crash, whichever test ran it;
without frames, on the process's name. A `failed` exec job (its tests failed) keys on the
failing test ids its runner printed (`tests`), else on its last output lines.
The id is a hash of the key's text. What other threads were doing is not in the key (it would
split one mode by accidental concurrency); correlation.py ranks it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from stress.analysis import exposure as exp
from stress.analysis import joins, lifecycle, upstream
from stress.analysis.known import KnownFailure
from stress.analysis.rundata import RunData
from stress.analysis.sigkeys import SignatureKey as SignatureKey  # (re-exported: reports)
from stress.analysis.sigkeys import compatible, merge_map, richness, why_not
from stress.analysis.stacks import (
    NON_STACK_CLASSES,
    STATUS_CLASSES,
    StackEvidence,
    as_tid,
    failing_stack,
    thread_state,
)
from stress.analysis.stats import Rate
from stress.keys import blank_numbers, message_key
from stress.programs import dtypes

PROGRAMS_SHOWN: int = 4  # programs a miscompare's finding names, most frequent first
TESTS_IN_KEY: int = 3  # failing test ids in a `failed` key (sorted): more only say "..."
CHILD: str = "child "  # a child's crash without frames: the process's name
TEARDOWN: str = "teardown"
TEARDOWN_STEPS: frozenset[str] = frozenset({"device-release", "driver-release", "gc",
                                            "worker-exit"})  # journal.Step.is_teardown()


# --- keys ------------------------------------------------------------------------------------

OUTPUT_KEY_JOIN: str = " / "  # between an exec job's last output lines in a key (one line)


def output_message(row: dict[str, Any]) -> str:
    """An exec job's last output lines from the failure's evidence (`output_key`, normalized
    by the exec engine), each blanked again by `message_key` (idempotent, so a store written
    before a change of the engine's rules joins), joined on one line; "" when there are none."""
    lines = (row.get("evidence") or {}).get("output_key")
    if not isinstance(lines, list):
        return ""
    return OUTPUT_KEY_JOIN.join(k for x in lines if isinstance(x, str)
                                for k in [message_key(x)] if k)


def tests_message(row: dict[str, Any]) -> str:
    """A failed exec job's failing tests, as its runner named them (`tests` in its evidence),
    sorted, the first TESTS_IN_KEY of them; "" when no runner's summary was recognised."""
    tests = (row.get("evidence") or {}).get("tests")
    if not isinstance(tests, dict):
        return ""
    ids = tests.get("failed")
    if not isinstance(ids, list):
        return ""
    names = sorted({t for t in ids if isinstance(t, str) and t})
    if not names:
        return ""
    more = len(names) > TESTS_IN_KEY or int(tests.get("failed_count") or 0) > len(names)
    return ", ".join(names[:TESTS_IN_KEY]) + (", ..." if more else "")


def child_message(row: dict[str, Any]) -> str:
    """`child NAME` for a crash of a process of an exec job's group (its evidence's
    `child_crash`), "" otherwise: without frames, the process is the mode, not the test that
    ran it."""
    child = (row.get("evidence") or {}).get("child_crash")
    if not isinstance(child, dict):
        return ""
    return CHILD + (str(child.get("name") or "") or "?")


# --- signatures ------------------------------------------------------------------------------

@dataclass
class Signature:
    key: SignatureKey
    count: int = 0  # occurrences (errors: exact counts from the workers)
    rows: list[dict[str, Any]] = field(default_factory=list)
    jobs: set[exp.JobKey] = field(default_factory=set)  # jobs it hit
    procs: set[exp.ProcKey] = field(default_factory=set)  # processes it hit
    rate: Rate | None = None
    display: tuple[str, ...] = ()
    stack_sources: Counter[str] = field(default_factory=Counter)
    steps: Counter[str] = field(default_factory=Counter)  # each failure's own step
    exposures: Counter[exp.Exposure] = field(default_factory=Counter)
    patterns: Counter[str] = field(default_factory=Counter)
    programs: Counter[str] = field(default_factory=Counter)
    concurrency: Counter[str] = field(default_factory=Counter)  # workers x threads
    others: Counter[str] = field(default_factory=Counter)  # steps other threads had in flight
    first_seen: float | None = None
    last_seen: float | None = None
    example: str | None = None
    known: KnownFailure | None = None  # matched by the report against --known files
    merged: Counter[str] = field(default_factory=Counter)  # "key text (why)" -> failures
    #   folded in from a shorter or unsymbolized unwind of the same mode
    sites: Counter[str] = field(default_factory=Counter)  # where its unread crashes faulted
    #   (their cores' notes: `fault_site`), shown where it has no frames
    unjoined: Counter[str] = field(default_factory=Counter)  # unread crashes that joined no
    #   mode: why, and the modes read of their class and signal at other steps -> failures
    known_how: str = ""  # how a known-failures entry matched, when not exactly, or why a
    #   `key` entry of the same class, signal and step did not
    evidence_full: int = 0  # crashes with a core read and full stacks (the evidence budget)
    evidence_counted: int = 0  # crashes counted with a cheap record, past the budget
    phases: Counter[str] = field(default_factory=Counter)  # each failure's lifecycle phase
    phase_details: Counter[tuple[str, str]] = field(default_factory=Counter)  # (phase, what
    #   the frames say: "ELF destructor of libfault.so")
    stuck: Counter[str] = field(default_factory=Counter)  # hangs: what the stuck threads did
    functions: tuple[str, ...] = ()  # its failing thread's named functions (first row with
    #   any): what upstream shapes match
    upstream: upstream.Shape | None = None  # the known upstream shape it looks like

    @property
    def id(self) -> str:
        return self.key.id

    def compatible_with(self, key_text: str) -> str | None:
        """Why a key written elsewhere (a known-failures entry's `key`, from a run with
        symbols or a longer unwind) is this signature's mode; None when it is not. One way
        only: the entry must be at least as rich as this signature (an entry written from a
        poor unwind must not claim every richer one)."""
        entry = SignatureKey.parse(key_text)
        if richness(entry) < richness(self.key):
            return None
        return compatible(self.key, entry)

    def incompatible_with(self, key_text: str) -> str | None:
        """Why a known entry's `key` of the same class, signal, step and state does not match
        (the report says it, so that a missing symbol table does not silently make a known
        failure new); None when unrelated or matched."""
        return why_not(self.key, SignatureKey.parse(key_text))

    def full_texts(self, limit: int = 8, scan: int = 5000) -> tuple[str, ...]:
        """The key with each distinct full message of its rows in place of the cut one (first
        line, numbers blanked): what a known-failure pattern must match *every one* of when
        it does not match the key itself (known.KnownFailure.matches). Errors and
        miscompares only (a crash's or hang's row message is the harness's own line, not
        the fault's), and only rows whose message makes this key. Empty when there is no
        such row, more than `limit` distinct messages, or rows past `scan` (the signature
        cannot be judged by its messages: only the key counts)."""
        if self.key.cls not in NON_STACK_CLASSES:
            return ()
        lines: set[str] = set()
        for n, row in enumerate(self.rows):
            if n >= scan:
                return ()
            first = (row.get("message") or "").lstrip().partition("\n")[0].rstrip()
            if first and first not in lines:
                if message_key(first) != self.key.message:
                    continue
                lines.add(first)
                if len(lines) > limit:
                    return ()
        return tuple(sorted(self.key.with_message(blank_numbers(x)) for x in lines))

    @property
    def exposure(self) -> exp.Exposure:
        """What the rate is per: the exposure most of its failures belong to."""
        return self.exposures.most_common(1)[0][0] if self.exposures else exp.Exposure.JOB

    @property
    def cls(self) -> str:
        return self.key.cls

    @property
    def last_step(self) -> str | None:
        return self.key.step

    @property
    def frames(self) -> tuple[str, ...]:
        return self.key.frames

    def describe(self) -> str:
        k = self.key
        sig = f" {k.signal}" if k.signal else ""
        state = f" ({k.state})" if k.state else ""
        where = f" in {' < '.join(k.frames)}" if k.frames else ""
        msg = f": {k.message}" if k.message else ""
        return f"{k.cls}{sig}{state}{self.in_phase()} at {self.where_step()}{where}{msg}"

    @property
    def phase(self) -> str:
        """The lifecycle phase most of its failures were in (lifecycle.py): `work`,
        `device-release`, `driver-destroy`, `process-exit`; "" when it has no rows."""
        return self.phases.most_common(1)[0][0] if self.phases else ""

    @property
    def phase_detail(self) -> str:
        """What the frames say of the phase (`ELF destructor of libfault.so`), "" if nothing."""
        ds = Counter({d: n for (p, d), n in self.phase_details.items() if p == self.phase and d})
        return ds.most_common(1)[0][0] if ds else ""

    def in_phase(self) -> str:
        """` in process-exit (ELF destructor of libfault.so)`; with several phases, each with
        its count (` in device-release 3 / driver-destroy 1`); "" without rows, and for
        errors, miscompares and failed commands (their step says it; `phase` still does)."""
        if self.cls in NON_STACK_CLASSES or self.cls in STATUS_CLASSES:
            return ""
        if len(self.phases) > 1:
            return " in " + " / ".join(f"{p} {n}" for p, n in self.phases.most_common())
        return f" in {lifecycle.text(self.phase, self.phase_detail)}" if self.phase else ""

    def where_step(self) -> str:
        """`device-release`, or for a teardown group its steps: `teardown (device-release 4,
        driver-release 1)`."""
        if self.key.step != TEARDOWN:
            return self.key.step or "?"
        return f"{TEARDOWN} (" + ", ".join(f"{k} {v}" for k, v in self.steps.most_common()) + ")"

    def programs_text(self, top: int = PROGRAMS_SHOWN) -> str:
        """The programs of its failures, most first, each with its dtype and count
        (`binary.pow.f16.2x16x64x64+1x16x1x1 (f16) 22`): what a miscompare's user reruns."""
        shown = [f"{name}{f' ({dt})' if (dt := dtypes.in_name(name)) else ''} {n:,}"
                 for name, n in self.programs.most_common(top)]
        more = len(self.programs) - len(shown)
        return ", ".join(shown) + (f" and {more} more" if more > 0 else "") or "?"

    def others_share(self) -> dict[str, float]:
        """Share of this signature's failure rows during which another thread had each step
        in flight (raw, not compared with health: correlation.py does that)."""
        n = max(1, len(self.rows))
        return {k: round(v / n, 3) for k, v in self.others.most_common()}

    def as_dict(self) -> dict[str, Any]:
        r = self.rate
        return {"id": self.id, "key": self.key.text(), "key_detailed": self.key.detailed(),
                "class": self.cls,
                "signal": self.key.signal, "last_step": self.last_step,
                "thread_state": self.key.state or None, "frames": list(self.frames),
                "steps": dict(self.steps.most_common()),
                "stack": list(self.display), "stack_source": self.stack_sources.most_common(1)[0][0]
                if self.stack_sources else "none",
                "message": self.key.message, "count": self.count, "jobs_hit": len(self.jobs),
                "processes_hit": len(self.procs), "exposure": self.exposure.value,
                "rate": r.as_dict() if r else None,
                "rate_per_exposure": round(r.rate, 6) if r else None,
                "ci_low": round(r.low, 6) if r else None,
                "ci_high": round(r.high, 6) if r else None,
                "patterns": dict(self.patterns.most_common()),
                "programs": [p for p, _ in self.programs.most_common(10)],
                "concurrency": dict(self.concurrency.most_common()),
                "others_in_flight": self.others_share(),
                "first_seen_s": self.first_seen, "last_seen_s": self.last_seen,
                "example": self.example, "description": self.describe(),
                "known": self.known.as_dict() if self.known is not None else None,
                "evidence": {"full": self.evidence_full, "counted": self.evidence_counted},
                "merged": dict(self.merged), "unjoined": dict(self.unjoined),
                "fault_sites": dict(self.sites.most_common(5)),
                "known_how": self.known_how or None,
                "phase": self.phase or None, "phase_detail": self.phase_detail or None,
                "phases": dict(self.phases.most_common()),
                "threads": self.stuck.most_common(1)[0][0] if self.stuck else None,
                "upstream": self.upstream.as_dict() if self.upstream else None}


def failing_slot(steps: list[dict[str, Any]]) -> int | None:
    return next((s.get("slot") for s in steps if s.get("failing")), None)


def others_in_flight(row: dict[str, Any]) -> tuple[str, ...]:
    """Steps other threads had in flight when the failure was detected."""
    slot = failing_slot(row["steps"])
    own = f"t{slot}:" if slot is not None else None
    return tuple(sorted({e.split(":", 1)[1] for e in row["in_flight"]
                         if ":" in e and (own is None or not e.startswith(own))}))


_BOOKKEEPING_STEPS: frozenset[str] = frozenset({"job", "inject", "thread-start"})


def failing_step(row: dict[str, Any], stack: StackEvidence | None = None) -> str | None:
    """The step the failing thread was in. When the stack names a different thread than the
    journal did (a core file's crashing thread), that thread's innermost in-flight step from
    the row's raw entries (by native tid) wins over the recorded one."""
    step = row.get("last_step")
    tid = stack.tid if stack is not None else None
    if tid is None or tid == as_tid(row.get("native_tid")):
        return step
    flight: list[str] = []
    for e in sorted((e for e in row.get("steps") or [] if e.get("tid") == tid),
                    key=lambda e: float(e.get("t") or 0)):
        if e.get("step") in _BOOKKEEPING_STEPS:
            continue
        if e.get("phase") == "begin":
            flight.append(e["step"])
        elif e.get("phase") in ("end", "fail") and e.get("step") in flight:
            flight.reverse()
            flight.remove(e["step"])
            flight.reverse()
    return flight[-1] if flight else step


def key_step(step: str | None, frames: tuple[str, ...]) -> str | None:
    """The step as it enters the key. With native frames the teardown steps are one,
    `teardown`: the same join or destructor runs from whichever release drops the last
    reference (device release, driver release, gc, process exit), and which one that is
    depends on the pattern, not on the fault. Without frames the step is all we have."""
    return TEARDOWN if frames and step in TEARDOWN_STEPS else step


def key_of(row: dict[str, Any], stack: StackEvidence | None = None) -> SignatureKey:
    cls = row["class"]
    if cls in NON_STACK_CLASSES:
        return SignatureKey(cls, None, row.get("last_step") or "", "", (),
                            message_key(row.get("message") or ""))
    if cls in STATUS_CLASSES:
        return SignatureKey(cls, None, row.get("last_step") or "", "", (),
                            tests_message(row) or output_message(row))
    stack = stack if stack is not None else failing_stack(row)
    return SignatureKey(cls, row.get("signal") if cls == "crash" else None,
                        key_step(failing_step(row, stack), stack.frames), thread_state(row),
                        stack.frames, "" if stack.frames else
                        child_message(row) or output_message(row), stack.modules)


def build(data: RunData) -> list[Signature]:
    """Signatures, most jobs (or exits) hit first, each with its rate per exposure."""
    conc = {r["run_id"]: f"{r['config'].get('workers', '?')}x{r['config'].get('threads', '?')}"
            for r in data.runs}
    sigs: dict[SignatureKey, Signature] = {}
    keyed = [(row, stack, key_of(row, stack), joins.unread(row, stack))
             for row in data.failures for stack in [failing_stack(row)]]
    # one mode, two unwinds: a stack cut short, or unsymbolized frames, folds into the one
    #   richer key it is compatible with (and says so)
    precise: dict[SignatureKey, set[str]] = defaultdict(set)
    for row, stack, key, _ in keyed:
        precise[key].add(failing_step(row, stack) or "")
    folds = merge_map(Counter(k for _, _, k, _ in keyed if k.frames), precise)
    # crashes without native frames of their own (past the evidence budget, a lost core)
    #   join the mode of the crashes read with what is known of every crash (joins.py)
    joiner = joins.Joiner()
    for row, stack, key, unread in keyed:
        if row["class"] == "crash" and not unread:
            joiner.add_read(row, failing_step(row, stack), folds.get(key, (key, ""))[0])
        elif unread:
            joiner.add_python(row, failing_step(row, stack), key)
    for row, stack, key, unread in keyed:
        fold = joiner.target(row, failing_step(row, stack)) if unread else None
        if fold is not None and fold[0] == key:
            fold = None  # (its own mode)
        if fold is not None:
            fold = (fold[0], f"{joins.reason(row)}: {fold[1]}")
        elsewhere = joiner.elsewhere(row, failing_step(row, stack)) \
            if unread and fold is None and row["class"] == "crash" else []
        fold = fold or folds.get(key)
        if fold is not None:
            key, why = fold[0], f"{' < '.join(key.frames) or 'no frames'} ({fold[1]})"
        s = sigs.get(key)
        if s is None:
            s = sigs[key] = Signature(key, display=() if fold else stack.display)
        if fold is not None:
            s.merged[why] += 1
        elif not s.display:
            s.display = stack.display
        if elsewhere:
            s.unjoined[f"{joins.reason(row)}; nothing of its step read to join; read at "
                       "another step: " + ", ".join(
                           f"{k.id} ({k.step}" + (", the same fault site)"
                                                  if joiner.same_site(row, k) else ")")
                           for k in elsewhere[:3])] += 1
        site = (row.get("evidence") or {}).get("fault_site")
        if unread and isinstance(site, dict) and site.get("text"):
            s.sites[str(site["text"])] += 1
        if row["class"] == "crash":
            s.evidence_counted += unread
            s.evidence_full += not unread
        row = {**row, "step": failing_step(row, stack) or ""}  # the corrected step
        if row["class"] not in NON_STACK_CLASSES:
            s.count += 1
            _place(s, row, conc)
        s.rows.append(row)
        s.steps[row["step"]] += 1
        phase = stack.phase or lifecycle.rules().of_step(row["step"] or None).value
        s.phases[phase] += 1
        s.phase_details[(phase, stack.phase_detail)] += 1
        if stack.threads:
            s.stuck[stack.threads] += 1
        if stack.functions and not s.functions:
            s.functions = stack.functions
        s.exposures[exp.exposure_of(row)] += 1
        if not unread:  # a crash joined by what is known of it has no stacks of its own
            s.stack_sources[stack.source] += 1
        s.others.update(others_in_flight(row))
        _seen(s, row)
    for s in sigs.values():  # a mode seen only through folded unwinds still shows a stack
        if not s.display:  # (a crash read first, then any)
            stacks = [failing_stack(r) for r in s.rows[:20]]
            s.display = next((st.display for st, r in zip(stacks, s.rows, strict=False)
                              if st.display and not joins.unread(r, st)),
                             stacks[0].display if stacks else ())
    # errors and miscompares: exact counts per job from the workers; rows are examples
    for c in data.counts:
        cls, step, msg = (c["key"].split("|", 2) + ["", ""])[:3]
        key = SignatureKey(cls, None, step, "", (), message_key(msg))
        s = sigs.get(key)
        if s is None:
            s = sigs[key] = Signature(key)
        n = int(c["count"])
        if not s.rows:  # a mode seen only in the counts: its step says the phase
            s.phases[lifecycle.rules().of_step(step or None).value] += n
        s.count += n
        s.patterns[c["pattern"]] += n
        s.programs[c["program"]] += n
        s.concurrency[conc.get(c["run_id"], "?")] += n
        s.jobs.add((c["run_id"], int(c["job_index"])))
    for s in sigs.values():
        if s.cls in NON_STACK_CLASSES and not data.counts:  # a store without counts
            s.count = len(s.rows)
            for row in s.rows:
                _place(s, row, conc)
    _rates(data, list(sigs.values()))
    for s in sigs.values():
        if s.cls not in NON_STACK_CLASSES and s.cls not in STATUS_CLASSES:
            s.upstream = upstream.match(s.cls, s.key.state, s.phase, s.functions, s.rows)
    return sorted(sigs.values(), key=lambda s: (-(s.rate.failures if s.rate else 0), -s.count,
                                                s.id))


def _place(s: Signature, row: dict[str, Any], conc: dict[str, str]) -> None:
    if row.get("pattern"):
        s.patterns[row["pattern"]] += 1
    if row.get("program"):
        s.programs[row["program"]] += 1
    s.concurrency[conc.get(row["run_id"], "?")] += 1
    jk, pk = exp.job_key(row), exp.proc_key(row)
    if jk:  # a failure rated per process exit still fails the job it ended (an exec job's
        #   crash after its summary line): one definition of a failing job for the report,
        #   the gate, the JSON, JUnit and HTML (issue 36 item 9)
        s.jobs.add(jk)
    if pk:
        s.procs.add(pk)


def _rates(data: RunData, sigs: list[Signature]) -> None:
    clusters = exp.job_clusters(data)
    for s in sigs:
        if s.exposure is exp.Exposure.PROCESS_EXIT:
            s.rate = exp.exit_rate(data, s.procs)
        elif s.exposure in (exp.Exposure.FULL_TEARDOWN, exp.Exposure.DRIVER_TEARDOWN):
            hits: Counter[exp.JobKey] = Counter(k for r in s.rows for k in [exp.job_key(r)] if k)
            s.rate = exp.full_teardown_rate(data, hits) \
                if s.exposure is exp.Exposure.FULL_TEARDOWN else \
                exp.driver_teardown_rate(data, hits)
        else:
            s.rate = exp.job_rate(data, s.jobs, clusters)


def _seen(s: Signature, row: dict[str, Any]) -> None:
    t = float(row.get("elapsed_s") or 0.0)
    s.first_seen = t if s.first_seen is None else min(s.first_seen, t)
    s.last_seen = t if s.last_seen is None else max(s.last_seen, t)
    if s.example is None:
        message = (row.get("message") or "").strip()
        s.example = row.get("artifacts") or (message.splitlines()[0][:200] if message else None)
