"""Numeric formats and their storage sizes."""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from costmodel.errors import CostModelError


class Precision(IntEnum):
    BF16 = 0
    FP8 = 1
    FP4 = 2

    @classmethod
    def parse(cls, text: str) -> Precision:
        try:
            return cls[text.upper()]
        except KeyError:
            known = ", ".join(p.name.lower() for p in cls)
            raise CostModelError(f"unknown precision {text!r}; known: {known}") from None


# Bytes per element. FP4 is MXFP4: 4-bit values plus one 8-bit scale per 32 (OCP MX spec),
# i.e. 4.25 bits; FP8 block scales (128x128 in DeepSeek-V3) add under 0.01% and are ignored.
BYTES_PER_ELEMENT = {Precision.BF16: 2.0, Precision.FP8: 1.0, Precision.FP4: 4.25 / 8}


def default_attention_precision(precision):
    """Non-expert weights (attention, dense FFN, shared experts, router, embeddings and LM
    head) when no precision is given for them: the routed experts' one, but FP8 or wider,
    since MXFP4 is for routed experts only (as gpt-oss and the K3-like preset ship them).
    Works on scalars and arrays of `Precision` codes."""
    codes = np.asarray(precision)
    return np.where(codes == Precision.FP4, np.int64(Precision.FP8), codes).astype(np.int64)
