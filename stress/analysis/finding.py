"""One line of the answer: a signature as a user reads it (what failed, its frames or its
message, who crashed, what the other threads did, how often, where, known or new). The report
(report.py) lists them first, in every rendering."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stress.analysis import correlation, culprit, gpuidle, signatures
from stress.analysis.signatures import Signature
from stress.vocab import FailureClass

FRAMES_SHOWN: int = 3  # frames on a finding's line; the signature tables show them all


def _label(s: Signature) -> str:
    """What a finding's first line shows: a message (errors, miscompares), frames, or for an
    exec failure without frames its failing tests, the process that died, or its output."""
    if s.cls in ("error", "miscompare"):
        return "message"
    if s.frames or not s.key.message or s.cls == gpuidle.CLASS:
        return "frames"
    first = s.rows[0] if s.rows else {}
    if s.cls == FailureClass.FAILED and s.key.message == signatures.tests_message(first):
        return "tests"
    return "process" if s.key.message == signatures.child_message(first) else "last output"


@dataclass
class Finding:
    """One line of the answer: a signature as a user reads it."""

    signature: Signature
    correlation: correlation.SignatureCorrelation | None

    @property
    def is_known(self) -> bool:
        return self.signature.known is not None

    def what(self) -> str:
        k = self.signature.key
        sig = f" {k.signal}" if k.signal else ""
        state = f" ({k.state})" if k.state else ""
        return f"{k.cls}{sig}{state}{self.signature.in_phase()} at {self.signature.where_step()}"

    def frames(self) -> str:
        s = self.signature
        shown = list(s.display[:FRAMES_SHOWN]) or list(s.frames)
        src = s.stack_sources.most_common(1)[0][0] if s.stack_sources else ""
        if s.cls == gpuidle.CLASS:  # no stack: the time line's samples are the evidence
            return s.example or "-"
        if not shown:
            if s.cls in ("error", "miscompare") or s.key.message:  # an exec job's output
                return s.key.message or "-"
            return f"no native frames (stack source: {src or 'none'})"
        return " < ".join(shown) + (f"   [{src}]" if src and src != "none" else "")

    def how_often(self) -> str:
        s = self.signature
        r = s.rate
        extra = f"; {s.count:,} occurrences" if s.count != (r.failures if r else 0) else ""
        return (r.describe() if r else f"{s.count} occurrences") + extra

    def where(self) -> str:
        s = self.signature
        total = max(1, sum(s.patterns.values()))
        pats = ", ".join(f"{p} {100 * n / total:.0f}%" for p, n in s.patterns.most_common(4))
        conc = ", ".join(c for c, _ in s.concurrency.most_common(3))
        return f"{pats or '?'}; workers x threads {conc or '?'}"

    def others(self) -> str:
        return self.correlation.verdict() if self.correlation else "not correlated"

    @property
    def others_tested(self) -> bool:
        """Whether the other threads were compared at all (else the row says nothing)."""
        return self.correlation is not None and bool(self.correlation.tested
                                                     or self.correlation.standing_out)

    def status(self) -> str:
        return "KNOWN" if self.is_known else "NEW"

    def known_as(self) -> str:
        k = self.signature.known
        how = f"; {self.signature.known_how}" if self.signature.known_how else ""
        return "" if k is None else k.note + (f" ({k.link})" if k.link else "") + how

    def rows(self) -> list[tuple[str, str]]:
        """The lines under the headline, as (label, text)."""
        s = self.signature
        label = _label(s)
        who = culprit.culprit(s)
        out = [(culprit.label(s) or "", who)] if who else []
        out.append((label, self.frames()))
        if s.sites and not s.frames:  # no stacks read: where its crashes faulted
            out.append(("fault site", "; ".join(f"{n} in {t}" for t, n in s.sites.most_common(3))
                        + " (from the cores' notes; stacks not read)"))
        if s.stuck:
            out.append(("threads", s.stuck.most_common(1)[0][0]))
        if s.upstream is not None:
            out.append(("matches", s.upstream.describe()))
        if s.cls == FailureClass.MISCOMPARE.value:  # which programs answered wrong, what dtype
            out.append(("programs", s.programs_text()))
        out += [("how often", self.how_often()), ("where", self.where())]
        if self.others_tested:
            out.append(("other threads", self.others()))
        if self.is_known:
            out.append(("known as", self.known_as()))
        out.append(("evidence", self.signature.example or "-"))
        if s.merged:
            out.append(("merged", "; ".join(f"{n} with {what}" for what, n in
                                            s.merged.most_common(3))))
        if s.unjoined:
            out.append(("not joined", "; ".join(f"{n} {what}" for what, n in
                                                s.unjoined.most_common(2))))
        if s.evidence_counted:
            out.append(("sampled", f"{s.evidence_full} with core and full stacks, "
                                   f"{s.evidence_counted} counted only (evidence budget: "
                                   "the first N of a mode, then every N*2^k-th; "
                                   "--evidence-budget)"))
        return out

    def as_dict(self) -> dict[str, Any]:
        s = self.signature
        return {"id": s.id, "status": "known" if self.is_known else "new",
                "known_as": self.known_as() or None,
                "known": s.known.as_dict() if s.known else None, "what": self.what(),
                "frames": self.frames(), "culprit": culprit.culprit(self.signature),
                "how_often": self.how_often(),
                "phase": s.phase or None, "phase_detail": s.phase_detail or None,
                "matches": s.upstream.describe() if s.upstream else None,
                "rate": s.rate.as_dict() if s.rate else None, "where": self.where(),
                "other_threads": self.others() if self.others_tested else None,
                "evidence": s.example,
                "sampled": {"full": s.evidence_full, "counted": s.evidence_counted}}
