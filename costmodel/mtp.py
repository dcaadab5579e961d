"""Multi-token prediction (MTP): how many tokens a decode step yields per sequence.

A decode step with `mtp` drafts verifies the sequence's next token plus `mtp`
drafted ones in one forward pass. The model's own token is always kept; draft i
is kept only if drafts 1 .. i-1 were and the model agrees with it (chain
verification, as TensorRT-LLM, SGLang and vLLM run DeepSeek's MTP head:
acceptance stops at the first rejected draft). So a step yields
`1 + accepted drafts` tokens.

`probs[i - 1]` is the conditional acceptance probability of draft i given that
the drafts before it were accepted (position 1 = the first draft token). Past
the last listed position the last probability repeats. Then

    E[tokens per step] = 1 + sum_{i=1..mtp} prod_{j=1..i} probs[j - 1].

Two entry points:

- `expected_tokens_per_step(mtp, probs)`: the mean, vectorised over `mtp`; what
  the cost core divides a decode step by to get the time per output token.
- `draw_tokens_per_step(rng, mtp, size, probs)`: integer draws of the same
  distribution (1 + accepted drafts per step and sequence) from a seeded numpy
  Generator, for decode workers that emit a varying number of tokens per step.
  `mtp` broadcasts against `size`; the same generator state gives the same draws.

`default_mtp(model)` is the drafts per step a model's shipped MTP head runs with by
default: one per shipped MTP module (0 for a model without one).
"""

from __future__ import annotations

import numpy as np

from costmodel.model_spec import ModelSpec

# Conditional acceptance of DeepSeek-V3/R1's MTP head, by draft position.
# Position 1: DeepSeek-V3's technical report (arXiv 2412.19437) measures 85-90%
#   acceptance of the second token; we take the low end, 0.85. (TensorRT-LLM
#   measures 1.92 tokens per step with one draft, i.e. 0.92; SGLang ~1.9,
#   https://github.com/sgl-project/sglang/pull/3582.)
# Positions 2-5: TensorRT-LLM's measured mean tokens per step of DeepSeek-R1 with 1-5
#   autoregressive MTP drafts on B200 are 1.92, 2.58, 2.82, 2.99, 3.01
#   (https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/blogs/tech_blog/
#   blog1_Pushing_Latency_Boundaries_Optimizing_DeepSeek-R1_Performance_on_NVIDIA_B200_GPUs.md,
#   "Autoregressive MTP Layers"). Their successive ratios give conditional rates of
#   0.72, 0.36, 0.71, 0.12 (each count is a separate 10-request run, so the tail is noisy);
#   smoothed to decrease: 0.72, 0.45, 0.40, 0.25. With 0.85 first this gives 1.85, 2.46,
#   2.74, 2.85, 2.88 tokens per step, 0.07-0.14 below TensorRT-LLM's figures.
# vLLM measures 81-82.3% with one draft on DeepSeek-R1
# (https://github.com/vllm-project/vllm/pull/12755), just below the report's range.
# The model file carries these (costmodel/data/models/deepseek-v3.json, `mtp_acceptance`);
# this tuple is also the default of a model whose file gives none.
DEEPSEEK_V3_ACCEPTANCE: tuple[float, ...] = (0.85, 0.72, 0.45, 0.40, 0.25)


def check_acceptance(values, where: str) -> tuple[float, ...]:
    """`values` as acceptance probabilities by draft position: a non-empty list of numbers
    in [0, 1], not increasing (a later draft is accepted no more often than an earlier
    one). Anything else is a `CostModelError` naming `where`."""
    from costmodel.errors import CostModelError

    ok = isinstance(values, (list, tuple)) and len(values) > 0 and all(
        isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 <= p <= 1.0
        for p in values)
    if not ok:
        raise CostModelError(f"{where}: expected a non-empty list of probabilities in [0, 1], "
                             f"got {values!r}")
    probs = tuple(float(p) for p in values)
    for i in range(1, len(probs)):
        if probs[i] > probs[i - 1]:
            raise CostModelError(f"{where}: position {i + 1} ({probs[i]}) above position {i} "
                                 f"({probs[i - 1]}): acceptance does not rise with position")
    return probs


def parse_acceptance(text: str, where: str = "--mtp-acceptance") -> tuple[float, ...]:
    """`0.85,0.7,0.5` -> (0.85, 0.7, 0.5), checked as `check_acceptance` does."""
    from costmodel.errors import CostModelError

    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise CostModelError(f"{where}: expected comma-separated probabilities, got "
                             f"{text!r}") from None
    return check_acceptance(values, where)


def model_acceptance(model: ModelSpec) -> tuple[float, ...]:
    """The model's own acceptance by draft position, else the generic default."""
    return model.mtp_acceptance or DEEPSEEK_V3_ACCEPTANCE


def _probabilities(probs, drafts: int) -> np.ndarray:
    """`drafts` conditional probabilities: `probs`, its last one repeated as needed."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.size == 0 or np.any(~(p >= 0.0)) or np.any(p > 1.0):
        raise ValueError(f"probs: expected a non-empty list of probabilities, got {probs!r}")
    if drafts <= p.size:
        return p[:drafts]
    return np.concatenate([p, np.full(drafts - p.size, p[-1])])


def _drafts(mtp) -> np.ndarray:
    m = np.asarray(mtp)
    if m.size and (np.any(m < 0) or np.any(m != np.floor(m))):
        raise ValueError(f"mtp: expected whole numbers >= 0, got {mtp!r}")
    return m.astype(np.int64)


def expected_tokens_per_step(mtp, probs=DEEPSEEK_V3_ACCEPTANCE):
    """Mean tokens a decode step yields per sequence with `mtp` drafts (array-like)."""
    m = _drafts(mtp)
    most = int(m.max()) if m.size else 0
    # cum[i]: expected accepted drafts with i drafts; cum[0] = 0, so no MTP gives exactly 1.
    cum = np.concatenate([[0.0], np.cumsum(np.cumprod(_probabilities(probs, most)))])
    return 1.0 + cum[m]


def draw_tokens_per_step(rng: np.random.Generator, mtp, size,
                         probs=DEEPSEEK_V3_ACCEPTANCE) -> np.ndarray:
    """Tokens each of `size` (steps x sequences, any shape) decode steps yields: 1 plus
    the drafts accepted before the first rejection, out of `mtp` (broadcast to `size`)."""
    shape = (size,) if np.isscalar(size) else tuple(size)
    m = np.broadcast_to(_drafts(mtp), shape)
    most = int(m.max()) if m.size else 0
    if most == 0:
        return np.ones(shape, dtype=np.int64)
    p = _probabilities(probs, most)
    accepted = rng.random((*shape, most)) < p
    accepted &= np.arange(most) < m[..., None]  # no draft past the sequence's own count
    return 1 + np.cumprod(accepted, axis=-1).sum(axis=-1)


def default_mtp(model: ModelSpec) -> int:
    """Drafts per decode step a model's shipped MTP head runs with by default: one per
    shipped MTP module (`num_nextn_predict_layers`), 0 for a model with none.

    DeepSeek-V3 ships one module (`num_nextn_predict_layers: 1`) and its report's 1.8x
    decode speed-up is with one draft (arXiv 2412.19437); vLLM's `num_speculative_tokens`
    defaults to the draft config's count (https://docs.vllm.ai/projects/ascend/en/
    v0.11.0/developer_guide/feature_guide/Multi_Token_Prediction.html), and SGLang's
    DeepSeek guide names one draft (`--speculative-num-steps 1 --speculative-eagle-topk 1
    --speculative-num-draft-tokens 2`) the setting that "can achieve speedup for larger
    batch sizes" (https://github.com/sgl-project/sglang/blob/main/docs/basic_usage/
    deepseek_v3.md), the regime of a loaded decode pool. Latency-first deployments run
    three drafts (SGLang's default when MTP is on, TensorRT-LLM's min-latency recipe):
    set `mtp` for those."""
    return int(model.mtp_layers)
