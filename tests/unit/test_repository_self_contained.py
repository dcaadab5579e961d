"""A fresh clone stands alone: no file cites or reads documents kept outside the repository."""

import os
from pathlib import Path

from tests.conftest import ROOT

TEXT_SUFFIXES = {".py", ".md", ".toml", ".json", ".txt", ".cfg", ".yaml", ".yml", ".sh"}
# Not the repository's own text: tool caches and run outputs (.gitignore).
SKIPPED_DIRS = {".git", ".venv", "build", "__pycache__", ".pytest_cache", ".ruff_cache",
                ".hypothesis", "tokenfactory.egg-info", ".tokenfactory", "out", "runs",
                "demo-out", "compare-out", "sweep-out"}
# Documents beside the checkout, not in it (spelled in two parts so that this file does
# not match itself).
OUTSIDE = ("BRIEF" + ".md", "REFERENCE" + ".md", "../" + "shared")


def text_files():
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]  # prune, not just filter
        for name in files:
            path = Path(folder) / name
            if path.suffix in TEXT_SUFFIXES or name == "Makefile":
                yield path.relative_to(ROOT), path


def test_no_file_cites_a_document_outside_the_repository():
    hits = [f"{rel}:{n}: {needle}"
            for rel, path in text_files()
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            for needle in OUTSIDE if needle in line]
    assert hits == []


def test_the_scan_sees_the_files_that_once_cited_them():
    seen = {str(rel) for rel, _ in text_files()}
    assert {"costmodel/data/hardware/h100.toml", "costmodel/data/models/kimi-k3-like.json",
            "orchestrator/control/config.py", "docs/costmodel.md", "README.md",
            "tests/conftest.py"} <= seen
