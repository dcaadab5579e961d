"""Model specs by name or file: the presets in `data/models/` (HuggingFace
`config.json` files: DeepSeek-V3/Kimi K2, Kimi-Linear, Qwen3 MoE, Qwen3-Next,
gpt-oss, Llama shapes) and any such file by path. The spec itself is
`costmodel/model_spec.py` (re-exported here), the reading of a config
`costmodel/hf_config.py`.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

from costmodel.errors import CostModelError
from costmodel.files import read_text
from costmodel.hf_config import model_from_hf_config
from costmodel.model_spec import (
    GQA,
    MLA,
    AttentionKind,
    LinearAttention,
    LinearKind,
    ModelSpec,
    MoE,
)

__all__ = [
    "DATA_DIR",
    "GQA",
    "MLA",
    "AttentionKind",
    "LinearAttention",
    "LinearKind",
    "MoE",
    "ModelSpec",
    "load_model",
    "load_model_file",
    "model_names",
]

DATA_DIR = Path(__file__).parent / "data" / "models"



def model_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.json"))


def load_model_file(path: Path) -> ModelSpec:
    path = Path(path)
    text = read_text(path)
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CostModelError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(config, dict):
        raise CostModelError(f"{path}: expected a JSON object at the top level")
    name = path.stem if path.name != "config.json" else path.parent.name or "config"
    return model_from_hf_config(config, name=name, where=str(path))


@cache
def _preset(name: str) -> ModelSpec:
    path = DATA_DIR / f"{name}.json"
    if not path.is_file():
        raise CostModelError(f"unknown model {name!r}; known: {', '.join(model_names())}")
    return load_model_file(path)


def load_model(name_or_path: str) -> ModelSpec:
    """A preset by name (`deepseek-v3`, `kimi-k3-like`, ...) or a config.json by path."""
    if name_or_path.endswith(".json") or os.sep in name_or_path:
        return load_model_file(Path(name_or_path))
    return _preset(name_or_path.lower())
