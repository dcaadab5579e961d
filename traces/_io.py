"""Opening trace files: gzip or plain, whole or line by line, with located errors."""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import msgspec

from traces.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
# Errors a damaged gzip stream raises, depending on where the damage is.
_GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile, OSError)


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def _open(path: Path):
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


def check_readable(path: Path) -> None:
    if not path.exists():
        raise TraceError(path, None, "path", "no such file or directory")
    if not path.is_file():
        raise TraceError(path, None, "path", "not a regular file")


def read_bytes(path: Path) -> bytes:
    """The whole decompressed content; a damaged or empty file raises TraceError."""
    check_readable(path)
    try:
        with _open(path) as f:
            data = f.read()
    except _GZIP_ERRORS as exc:
        raise TraceError(path, None, "gzip", f"damaged or truncated gzip stream ({exc})") from None
    if not data.strip():
        raise TraceError(path, None, "file", "empty file")
    if b"\x00" in data:
        raise TraceError(path, None, "file", "binary content (NUL bytes), not a trace")
    return data


def head(path: Path, size: int = 8192) -> bytes:
    """The first `size` decompressed bytes, for format detection."""
    check_readable(path)
    try:
        with _open(path) as f:
            return f.read(size)
    except _GZIP_ERRORS as exc:
        raise TraceError(path, None, "gzip", f"damaged or truncated gzip stream ({exc})") from None


def iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line) for every non-blank line, streamed."""
    check_readable(path)
    lineno = 0
    seen_any = False
    try:
        with _open(path) as f:
            for lineno, line in enumerate(f, start=1):
                if b"\x00" in line:
                    raise TraceError(
                        path, lineno, "file", "binary content (NUL bytes), not a trace"
                    )
                if line.strip():
                    seen_any = True
                    yield lineno, line
    except _GZIP_ERRORS as exc:
        raise TraceError(
            path, lineno + 1, "gzip", f"damaged or truncated gzip stream ({exc})"
        ) from None
    if not seen_any:
        raise TraceError(path, None, "file", "empty file")


_AT = re.compile(r"^(?P<problem>.*?) - at `\$(?P<path>[^`]*)`$")
_FIELD = re.compile(r"field `(?P<field>[^`]+)`")


def msgspec_problem(exc: msgspec.MsgspecError) -> tuple[str, str]:
    """Split a msgspec error into (field, what is wrong)."""
    text = str(exc)
    match = _AT.match(text)
    if match:
        return match["path"].lstrip(".") or "record", match["problem"]
    match = _FIELD.search(text)
    if match:
        return match["field"], text
    return "record", text


def line_of_offset(data: bytes, message: str) -> int | None:
    """The line a msgspec DecodeError's `(byte N)` points at, if it says."""
    match = re.search(r"\(byte (\d+)\)", message)
    if not match:
        return None
    return data.count(b"\n", 0, int(match[1])) + 1
