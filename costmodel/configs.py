"""What the cost core is asked about: the phase of a step and the configuration arrays.

The bottom of the cost core: `costmodel/terms.py`, `kernels.py`, `draft.py` and
`phase.py` import these and nothing here imports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from costmodel.precision import Precision, default_attention_precision


class Phase(IntEnum):
    PREFILL = 0  # new tokens, (almost) nothing cached
    MIDFILL = 1  # a long cached prefix plus a short new suffix
    DECODE = 2  # one token per sequence per step (more with MTP)


@dataclass(frozen=True)
class Configs:
    """Configuration arrays (broadcast together). `batch` is sequences per attention
    data-parallel rank per micro-batch; `new_tokens` per sequence (decode: ignored, one
    token plus `mtp` drafts); `context` the cached tokens each sequence already holds.
    `precision` is the routed experts'; `attention_precision` that of every other weight
    (attention, dense FFN, shared experts, router, LM head): None gives the default rule,
    `precision.default_attention_precision`. `group_sequences`: the sequences of a
    micro-batch over all the stage's attention ranks, when they are not spread evenly
    (a data-parallel attention worker places whole sequences on ranks: `batch` is then
    the slowest rank's); None is `batch` on every rank."""

    phase: np.ndarray
    batch: np.ndarray
    new_tokens: np.ndarray
    context: np.ndarray
    pp: np.ndarray
    tp: np.ndarray
    ep: np.ndarray
    precision: np.ndarray
    hardware: np.ndarray
    kv_precision: np.ndarray
    mtp: np.ndarray
    attention_precision: np.ndarray | None = None
    group_sequences: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.attention_precision is None:
            object.__setattr__(self, "attention_precision",
                               default_attention_precision(self.precision))

    @classmethod
    def make(cls, *, phase, batch, new_tokens, context, pp=1, tp=1, ep=1,
             precision=Precision.FP8, hardware=0, kv_precision=Precision.BF16, mtp=0,
             attention_precision=None, group_sequences=None):
        if attention_precision is None:
            attention_precision = default_attention_precision(precision)
        arrays = np.broadcast_arrays(
            np.asarray(phase, dtype=np.int64), np.asarray(batch, dtype=np.float64),
            np.asarray(new_tokens, dtype=np.float64), np.asarray(context, dtype=np.float64),
            np.asarray(pp, dtype=np.float64), np.asarray(tp, dtype=np.float64),
            np.asarray(ep, dtype=np.float64), np.asarray(precision, dtype=np.int64),
            np.asarray(hardware, dtype=np.int64), np.asarray(kv_precision, dtype=np.int64),
            np.asarray(mtp, dtype=np.float64), np.asarray(attention_precision, dtype=np.int64),
            *(() if group_sequences is None else (np.asarray(group_sequences, np.float64),)),
        )
        return cls(*(np.ravel(a) for a in arrays))

    def select(self, index) -> Configs:
        """The configurations at `index` (a mask or a slice), every column alike."""
        return Configs(*(None if a is None else a[index] for a in vars(self).values()))

    def __len__(self) -> int:
        return self.phase.shape[0]
