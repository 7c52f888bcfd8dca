"""User programs (`--program FILE.mlir`): plain func.func on tensors, or torch-dialect MLIR as
fusilli emits it (value tensors in, results written in place into mutable !torch.tensor
arguments, nothing returned). Inputs are generated from the signature; with no numpy reference,
correctness means identical results across repeated invocations and devices."""

from __future__ import annotations

import re
from pathlib import Path

from stress.errors import UsageError
from stress.programs import dtypes
from stress.programs.program import Arg, Program, Role

_FUNC = re.compile(r"func\.func\s+(?:public\s+)?@([\w$.]+)\s*\(", re.S)
_TENSOR = re.compile(r"tensor<((?:[0-9?]+x)*)([a-z0-9]+)>")
_TORCH = re.compile(r"!torch\.(v?tensor)<\[([0-9?,\s-]*)\],\s*([a-z0-9]+)>")


def _split_top(text: str) -> list[str]:
    """Splits on commas that are not inside <>, (), [] or {}."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts


def _balanced(text: str, start: int) -> tuple[str, int]:
    """Text inside the parenthesis opened just before `start`, and the index after it."""
    depth = 1
    i = start
    while i < len(text) and depth:
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
        i += 1
    return text[start:i - 1], i


def _parse_type(text: str, where: str) -> Arg:
    text = text.strip()
    m = _TORCH.search(text)
    if m:
        kind, dims, dt = m.groups()
        dtype = dtypes.TORCH_DTYPES.get(dt)
        shape = tuple(None if d.strip() in ("?", "-1") else int(d)
                      for d in dims.split(",") if d.strip())
        role = Role.OUTPUT if kind == "tensor" else Role.INPUT
    else:
        m = _TENSOR.search(text)
        if not m:
            raise UsageError(f"{where}: unsupported argument type {text!r} (want tensor<...> "
                             f"or !torch.vtensor/!torch.tensor)")
        dims, dtype_text = m.groups()
        dtype = dtype_text if dtype_text in dtypes.DTYPES else None
        shape = tuple(None if d == "?" else int(d) for d in dims.split("x") if d)
        role = Role.INPUT
        dt = dtype_text
    if dtype is None:
        raise UsageError(f"{where}: element type {dt!r} not supported; "
                         f"supported: {', '.join(dtypes.DTYPES)}")
    return Arg(shape, dtype, role)


def parse(text: str, source: str, entry: str | None = None) -> Program:
    funcs = list(_FUNC.finditer(text))
    if not funcs:
        raise UsageError(f"{source}: no func.func found")
    chosen = next((m for m in funcs if m.group(1) == (entry or "main")), funcs[0])
    name = chosen.group(1)
    args_text, after = _balanced(text, chosen.end())
    args = []
    for part in _split_top(args_text):
        if ":" not in part:
            continue
        args.append(_parse_type(part.split(":", 1)[1], f"{source} @{name}"))
    rest = text[after:after + 2000]
    results: list[Arg] = []
    m = re.match(r"\s*->\s*", rest)
    if m:
        res_text = rest[m.end():]
        if res_text.startswith("("):
            inner, _ = _balanced(res_text, 1)
            parts = _split_top(inner)
        else:
            parts = [res_text.split("{", 1)[0].split("attributes", 1)[0]]
        results = [_parse_type(p, f"{source} @{name} result") for p in parts if p.strip()]
    if not results and not any(a.role is Role.OUTPUT for a in args):
        raise UsageError(f"{source}: @{name} has no results and no mutable !torch.tensor output")
    first = (results or [a for a in args if a.role is Role.OUTPUT])[0]
    stem = Path(source).name.removesuffix(".mlir")
    return Program(
        name=f"user.{stem}", kind="user", op=name, dtype=first.dtype, args=tuple(args),
        results=tuple(results), mlir=text, input_type="torch" if "!torch." in text else "none",
        has_reference=False, source=str(source), entry=name)


def load(path: str) -> Program:
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise UsageError(f"program file not found: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return parse(text, str(p))
