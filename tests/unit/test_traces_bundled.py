"""The public data sets bundled in traces/data: present, licensed, and as their README says."""

import gzip
import hashlib
import json

import pytest

from tests.conftest import TRACE_DATA
from traces import DATA_SETS, data_path, read_sessions

LICENCES = {
    "weka-cc-dev": ("LICENSE", "Apache License"),
    "mooncake": ("LICENSE-APACHE", "Apache License"),
    "azure-2023": ("LICENSE", "Attribution 4.0 International"),
}


@pytest.mark.parametrize("name", DATA_SETS)
def test_each_data_set_carries_its_licence(name):
    assert data_path(name) == TRACE_DATA / name
    licence, heading = LICENCES[name]
    assert heading in (data_path(name) / licence).read_text(encoding="utf-8-sig")[:200]


def test_the_cc_by_data_set_carries_its_attribution():
    notice = (data_path("azure-2023") / "NOTICE").read_text()
    assert "https://github.com/Azure/AzurePublicDataset" in notice
    assert "Splitwise" in notice


def test_the_readme_names_every_data_set_and_its_source():
    readme = (TRACE_DATA / "README.md").read_text()
    for name in DATA_SETS:
        assert f"`{name}/`" in readme
    for url in ("https://github.com/callanjfox/kv-cache-tester",
                "https://github.com/kvcache-ai/Mooncake",
                "https://github.com/Azure/AzurePublicDataset"):
        assert url in readme


def test_an_unknown_data_set_is_refused_by_name():
    with pytest.raises(ValueError, match="'weka': .*weka-cc-dev, mooncake, azure-2023"):
        data_path("weka")


def test_the_azure_conversation_trace_is_whole():
    sessions = list(read_sessions(data_path("azure-2023")))
    assert len(sessions) == 19_366
    assert all(len(s.calls) == 1 for s in sessions)


def test_every_weka_file_matches_its_manifest_digest():
    folder = data_path("weka-cc-dev")
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    files = sorted(p.name for p in folder.glob("trace_*.json.gz"))
    assert files == sorted(m["file"] + ".gz" for m in manifest)
    for entry in manifest:
        raw = gzip.decompress((folder / (entry["file"] + ".gz")).read_bytes())
        assert len(raw) == entry["raw_bytes"], entry["file"]
        assert hashlib.sha256(raw).hexdigest() == entry["sha256_raw"], entry["file"]
