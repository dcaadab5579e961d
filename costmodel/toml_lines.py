"""Where a field of a TOML file is written: its line, for an error to name.

`tomllib` gives values, not places. `field_line` reads the text again, line by line,
following the tables and arrays of tables as TOML defines them, and finds the line of a
field named as the project's errors name it: `pools[2].gpus`, `pfs.read_gb_per_s`,
`name` (an index counts the `[[pools]]` headers from 0). It reads the forms the
project's files use (bare and quoted keys, dotted keys and headers, values that run
over several lines inside brackets or triple quotes); for a field it cannot find it
gives the line of the nearest table that holds it, or None.
"""

from __future__ import annotations

import re

_FIELD_PART = re.compile(r"([A-Za-z0-9_-]+)(?:\[(\d+)\])?")
_Path = tuple[str | int, ...]


def field_path(field: str) -> _Path | None:
    """`pools[2].gpus` -> ("pools", 2, "gpus"); None when `field` is not such a name."""
    path: list[str | int] = []
    for part in field.split("."):
        match = _FIELD_PART.fullmatch(part)
        if match is None:
            return None
        path.append(match.group(1))
        if match.group(2) is not None:
            path.append(int(match.group(2)))
    return tuple(path)


def _keys(text: str) -> list[str]:
    """A dotted key's parts, quotes taken off."""
    return [part.strip().strip('"').strip("'") for part in text.split(".")]


def _code(line: str) -> str:
    """The line without its comment (a `#` outside quotes)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#":
            return line[:i]
    return line


def _depth(code: str) -> int:
    """Brackets opened less those closed, outside quotes."""
    depth, quote = 0, ""
    for char in code:
        if quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
    return depth


def field_lines(text: str) -> dict[_Path, int]:
    """Every table's and key's path -> its line (from 1)."""
    lines: dict[_Path, int] = {}
    arrays: dict[_Path, int] = {}  # an array of tables -> the index of its last table
    table: _Path = ()
    open_brackets = 0
    in_string = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        if in_string:  # inside a triple-quoted value
            if raw.count(in_string) % 2 == 1:
                in_string = ""
            continue
        code = _code(raw).strip()
        if open_brackets > 0:  # a value running over several lines
            open_brackets += _depth(code)
            continue
        if not code:
            continue
        if code.startswith("["):  # a header: [table] or [[array of tables]]
            array = code.startswith("[[")
            keys = _keys(code.strip("[] \t"))
            path: list[str | int] = []
            for i, key in enumerate(keys):
                path.append(key)
                if tuple(path) in arrays and i < len(keys) - 1:  # its last table
                    path.append(arrays[tuple(path)])
            if array:
                index = arrays[tuple(path)] = arrays.get(tuple(path), -1) + 1
                path.append(index)
            table = tuple(path)
            lines.setdefault(table, number)
            continue
        key, sep, value = code.partition("=")
        if not sep:
            continue
        lines.setdefault(table + tuple(_keys(key)), number)
        value = value.strip()
        for quotes in ('"""', "'''"):
            if value.startswith(quotes) and value.count(quotes) == 1:
                in_string = quotes
        if not in_string:
            open_brackets = _depth(value)
    return lines


def field_line(text: str, field: str) -> int | None:
    """The line of `field` in the TOML `text`, or of the nearest table holding it; None
    when neither is written there."""
    path = field_path(field)
    if path is None:
        return None
    lines = field_lines(text)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return None


def with_field_line(message: str, where: str, text: str) -> str:
    """An error `WHERE: FIELD: what` about the TOML `text` read from WHERE, as
    `WHERE:LINE: FIELD: what`: the line where FIELD (or the table holding it) is written;
    the message as it was when no line is found."""
    if not message.startswith(f"{where}: "):
        return message
    rest = message[len(where) + 2:]
    line = field_line(text, rest.split(": ", 1)[0])
    return message if line is None else f"{where}:{line}: {rest}"
