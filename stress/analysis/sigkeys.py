"""Signature keys: a failure mode's identity as text (`class|signal|step|state|frames|message`,
hashed into its id), and when two keys are one mode seen through two unwinds (one stopped
early, or unsymbolized where the other is named), so that they fold into the richer one."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from stress.analysis.framerules import TOP_FRAMES, matches, rules


@dataclass(frozen=True)
class SignatureKey:
    cls: str
    signal: str | None
    step: str | None
    state: str  # busy | blocked | "" (hangs only)
    frames: tuple[str, ...]
    message: str
    # each frame's module ("" unknown), for matching an unsymbolized frame (`?? [lib.so]`)
    #   against a named one; not part of the text, the id or equality
    modules: tuple[str, ...] = field(default=(), compare=False)

    @staticmethod
    def parse(text: str) -> SignatureKey:
        """The key of `text()` (a report's `key`, a known-failures entry's `key`)."""
        parts = (text.split("|", 5) + [""] * 6)[:6]
        frames = tuple(f.strip() for f in parts[4].split(" < ") if f.strip())
        return SignatureKey(parts[0], parts[1] or None, parts[2] or None, parts[3], frames,
                            parts[5], tuple(frame_module(f) for f in frames))

    def module(self, i: int) -> str:
        if i < len(self.modules) and self.modules[i]:
            return self.modules[i]
        return frame_module(self.frames[i])

    def detailed(self) -> str:
        """text() with every native frame's module in brackets (`pthread_join [libc.so]`):
        what a known-failures `key` entry should copy, so that it can be matched against an
        unwind without symbols."""
        frames = [f if f.endswith("]") or not self.module(i) else f"{f} [{self.module(i)}]"
                  for i, f in enumerate(self.frames)]
        return "|".join([self.cls, self.signal or "", self.step or "", self.state,
                         " < ".join(frames), self.message])

    def text(self) -> str:
        """`class|signal|step|state|frame < frame < frame|message`: what ids hash and known
        failure patterns match."""
        return "|".join([self.cls, self.signal or "", self.step or "", self.state,
                         " < ".join(self.frames), self.message])

    @property
    def id(self) -> str:
        return "S" + hashlib.sha1(self.text().encode()).hexdigest()[:8]

    def with_message(self, message: str) -> str:
        """text() with another message in its place (known-failure patterns, `full_texts`)."""
        return "|".join([self.cls, self.signal or "", self.step or "", self.state,
                         " < ".join(self.frames), message])


_UNNAMED: str = "??"


def frame_module(key: str) -> str:
    """The module a frame key names (`?? [_runtime.so]`, a Python frame's `f [file.py]`)."""
    return key[key.rindex("[") + 1:-1] if key.endswith("]") and "[" in key else ""


def _unnamed(key: str) -> bool:
    return key == _UNNAMED or key.startswith(_UNNAMED + " [")


def _token(k: SignatureKey, i: int) -> tuple[str, str]:
    """Frame i of `k` as (name, module): the module of a native frame from the key's modules
    (a key read from text names it in brackets, `pthread_join [libc.so]`), "" unknown."""
    f = k.frames[i]
    name = f[:f.rindex(" [")] if f.endswith("]") and " [" in f else f
    return name, k.module(i)


def _counted(k: SignatureKey) -> int:
    """Frames of `k` that count toward TOP_FRAMES (prefix frames ride along uncounted)."""
    prefix = rules().prefix
    return sum(not matches(prefix, f"{n} [{m}]") for n, m in
               (_token(k, i) for i in range(len(k.frames))))


def _same_head(a: SignatureKey, b: SignatureKey) -> bool:
    return (a.cls, a.signal, a.step, a.state, a.message) == \
        (b.cls, b.signal, b.step, b.state, b.message)


def _frames_agree(a: SignatureKey, b: SignatureKey) -> tuple[int, int] | str:
    """(named frames the same, unsymbolized frames that stood in for a named one of the same
    module) over the shorter stack, or why they disagree."""
    named = wild = 0
    for i in range(min(len(a.frames), len(b.frames))):
        (na, ma), (nb, mb) = _token(a, i), _token(b, i)
        if na != _UNNAMED and nb != _UNNAMED:
            if na != nb or (ma and mb and ma != mb):
                return f"frame {i + 1} differs ({na} vs {nb})"
            named += 1
        elif na == nb == _UNNAMED:
            if ma != mb:
                return f"frame {i + 1} is in another module ({ma or '?'} vs {mb or '?'})"
        else:
            m_unnamed, m_named = (ma, mb) if na == _UNNAMED else (mb, ma)
            if not m_unnamed:
                return (f"frame {i + 1} is unsymbolized outside every known module: "
                        "it cannot be matched to a named frame")
            if not m_named:
                return f"frame {i + 1}'s named side gives no module to check against"
            if m_unnamed != m_named:
                return f"frame {i + 1} is in another module ({m_unnamed} vs {m_named})"
            wild += 1
    return named, wild


def compatible(a: SignatureKey, b: SignatureKey) -> str | None:
    """Why `a` and `b` may be one failure mode seen through two unwinds (None: they are not):
    the same class, signal, step, state and message, and frames that agree position by
    position over the shorter stack, the shorter one (if any) with fewer than TOP_FRAMES
    counted frames (its unwind stopped early). An unsymbolized frame (`?? [lib.so]`) stands
    in for a named frame only of the same, known, module; `?? []` (an address outside every
    module) only for itself. At least one named frame must be the same in both, and no fewer
    than the frames stood in for. Says "unwind stopped early" and/or "N frame(s)
    unsymbolized"."""
    if not _same_head(a, b) or not a.frames or not b.frames:
        return None
    if len(a.frames) != len(b.frames) and \
            min(_counted(a), _counted(b)) >= TOP_FRAMES:
        return None  # both unwinds were long enough: a longer key is another mode
    agree = _frames_agree(a, b)
    if isinstance(agree, str):
        return None
    named, wild = agree
    if named == 0 or named < wild or (wild == 0 and len(a.frames) == len(b.frames)):
        return None
    why = []
    if len(a.frames) != len(b.frames):
        why.append("unwind stopped early")
    if wild:
        why.append(f"{wild} frame(s) unsymbolized")
    return ", ".join(why)


def why_not(a: SignatureKey, b: SignatureKey) -> str | None:
    """Why key `b` (a known entry's) is not `a`'s mode although their class, signal, step
    and state agree (None when they do not agree that far, or when they are compatible)."""
    if not _same_head(a, b) or compatible(a, b):
        return None
    agree = _frames_agree(a, b)
    return agree if isinstance(agree, str) else "too few frames named the same in both"


def richness(k: SignatureKey) -> tuple[int, int]:
    return len(k.frames), -sum(_unnamed(f) for f in k.frames)


def merge_map(counts: Counter[SignatureKey],
              steps: dict[SignatureKey, set[str]] | None = None
              ) -> dict[SignatureKey, tuple[SignatureKey, str]]:
    """Keys to fold into a richer one (more frames, or fewer unsymbolized) that is the only
    compatible candidate: key -> (target, why). `steps`: each key's precise failing steps; a
    key folds only into one whose failures were seen at every step it was (the key's
    `teardown` groups several). A key compatible with several richer keys that are not
    compatible with each other stays as it is (it cannot be told which)."""
    out: dict[SignatureKey, tuple[SignatureKey, str]] = {}
    keys = sorted(counts, key=lambda k: (richness(k), counts[k], k.text()), reverse=True)
    for k in keys:
        richer = [(other, why) for other in keys if richness(other) > richness(k)
                  for why in [compatible(k, other)] if why and
                  (steps is None or steps.get(k, set()) <= steps.get(other, set()))]
        if not richer:
            continue
        best, why = max(richer, key=lambda c: (richness(c[0]), counts[c[0]], c[0].text()))
        if all(o is best or compatible(o, best) for o, _ in richer):
            out[k] = (out.get(best, (best, ""))[0], why)
    return out
