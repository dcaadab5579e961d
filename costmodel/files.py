"""Reading the project's data files, with one-line errors naming the file."""

from __future__ import annotations

import tomllib
from pathlib import Path

from costmodel.errors import CostModelError


def read_text(path: Path, error: type[Exception] = CostModelError) -> str:
    """The file's text; `error` names the file when it cannot be read or is not text."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not a text file") from None


def read_toml(path: Path, error: type[Exception] = CostModelError) -> dict:
    """The file's TOML table; `error` names the file on any problem."""
    try:
        return tomllib.loads(read_text(path, error))
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: invalid TOML: {exc}") from None
