"""Which reader reads a file: the closed list of formats and `--format auto`."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from pathlib import Path

from traces._io import head
from traces.azure import read_azure
from traces.errors import ProblemSink, TraceError
from traces.model import Session
from traces.mooncake import read_mooncake
from traces.native import read_native
from traces.weka import read_weka


class Format(enum.StrEnum):
    AUTO = "auto"
    WEKA = "weka"
    MOONCAKE = "mooncake"
    AZURE = "azure"
    NATIVE = "native"


Reader = Callable[[Path, int, ProblemSink | None], Iterator[Session]]
READERS: dict[Format, Reader] = {
    Format.WEKA: read_weka,
    Format.MOONCAKE: read_mooncake,
    Format.AZURE: read_azure,
    Format.NATIVE: read_native,
}

# What a directory's trace files are called; its other files (LICENSE,
# MANIFEST.json, *.md) are companions, not traces.
TRACE_SUFFIXES = (".json", ".jsonl", ".ndjson", ".csv")
COMPANIONS = frozenset({"MANIFEST.json"})


def parse_format(name: str) -> Format:
    try:
        return Format(name)
    except ValueError:
        choices = ", ".join(f.value for f in Format)
        raise TraceError("--format", None, "format", f"{name!r} is not one of {choices}") from None


def detect(path: Path) -> Format:
    """Tell a file's format from its first bytes (gzip is looked through)."""
    text = head(path).lstrip()
    if not text:
        raise TraceError(path, None, "file", "empty file")
    if b"\x00" in text:
        raise TraceError(path, None, "file", "binary content (NUL bytes), not a trace")
    first_line = text.split(b"\n", 1)[0]
    if first_line.startswith(b"{"):
        if b'"tokenfactory-trace"' in first_line:
            return Format.NATIVE
        if any(
            key in first_line for key in (b'"input_length"', b'"output_length"', b'"timestamp"')
        ):
            return Format.MOONCAKE
        if b'"requests"' in text or b'"hash_id_scope"' in text:
            return Format.WEKA
    if first_line.replace(b" ", b"").startswith(b"TIMESTAMP,ContextTokens"):
        return Format.AZURE
    raise TraceError(
        path,
        1,
        "format",
        "cannot tell the format; give --format "
        + "|".join(f.value for f in Format if f is not Format.AUTO),
    )


def trace_files(paths: list[Path] | tuple[Path, ...]) -> Iterator[Path]:
    """Each path, with a directory standing for its trace files, sorted by name."""
    for path in paths:
        path = Path(path)
        if path.is_dir():
            members = sorted(
                p
                for p in path.iterdir()
                if p.is_file()
                and not p.name.startswith(".")
                and p.name not in COMPANIONS
                and p.name.removesuffix(".gz").endswith(TRACE_SUFFIXES)
            )
            if not members:
                raise TraceError(
                    path,
                    None,
                    "path",
                    f"directory holds no trace files ({', '.join(TRACE_SUFFIXES)}, optionally .gz)",
                )
            yield from members
        elif path.exists():
            yield path
        else:
            raise TraceError(path, None, "path", "no such file or directory")


def single_kind(paths: list[Path] | tuple[Path, ...]) -> Format:
    """The one format every trace file under `paths` has, told by `detect`; a
    TraceError naming each path and its kinds when they differ (one replay reads
    one kind: the kinds differ in block size and in whether sessions carry a clock)."""
    kinds: dict[str, list[Format]] = {}
    for path in paths:
        for member in trace_files([path]):
            found = kinds.setdefault(str(path), [])
            kind = detect(member)
            if kind not in found:
                found.append(kind)
    distinct = {k for found in kinds.values() for k in found}
    if len(distinct) > 1:
        named = ", ".join(f"{p} ({'+'.join(k.value for k in found)})"
                          for p, found in kinds.items())
        raise TraceError(named, None, "format",
                         "trace kinds mixed in one replay; give files of one kind")
    return distinct.pop() if distinct else Format.AUTO
