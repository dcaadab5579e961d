import pytest

from costmodel.errors import LayoutError
from costmodel.hardware import load_hardware
from costmodel.layout import Layout, check_layout
from costmodel.model import load_model

DS = load_model("deepseek-v3")
H200 = load_hardware("h200")


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (Layout(tp=3, ep=3), r"tp=3 does not divide the 128 attention heads .*remainder 2"),
        (Layout(ep=512), r"ep=512 is larger than the 256 routed experts .*by 256"),
        (Layout(pp=64, ep=8), r"pp=64 is deeper than the 61 layer groups .*by 3"),
        (Layout(tp=16, ep=16), r"tp=16 spans more than the scale-up domain of 8 GPUs .*by 8"),
        (Layout(tp=4, ep=6), r"tp=4 and ep=6: the smaller must divide the larger"),
        (Layout(tp=1, ep=1), r"does not fit: .* GB of weights per GPU > 141.0 GB .*over by"),
        (Layout(tp=0), r"tp=0: expected a positive integer"),
    ],
)
def test_impossible_layouts_name_the_rule_and_amount(layout, message):
    with pytest.raises(LayoutError, match=message):
        check_layout(DS, H200, layout)


def test_possible_layouts_pass():
    check_layout(DS, H200, Layout(tp=8, ep=8))
    check_layout(load_model("kimi-k3-like"), load_hardware("gb200"), Layout(pp=4, tp=4, ep=16))


def test_gqa_kv_splits_by_kv_head_and_mla_replicates():
    llama, ds = load_model("llama-3.1-70b"), DS
    assert llama.kv_tp_split(4) == 4 and llama.kv_tp_split(16) == 8
    assert ds.kv_tp_split(8) == 1


def test_memory_is_a_separate_rule():
    from costmodel.layout import check_memory, check_structure

    too_big = Layout(tp=1, ep=1)  # all of DeepSeek-V3 on one H200
    check_structure(DS, H200, too_big)  # possible to run, just not on this GPU
    with pytest.raises(LayoutError, match="does not fit"):
        check_memory(DS, H200, too_big)
    with pytest.raises(LayoutError, match="tp=3 does not divide"):
        check_structure(DS, H200, Layout(tp=3, ep=3))


def test_bf16_attention_weights_can_break_the_fit():
    from costmodel.layout import check_memory
    from costmodel.precision import Precision

    # K3-like at TP1 x EP16 on H200: 129.6 GB per GPU with FP8 non-expert weights (each
    # GPU holds all of them at TP1), 168.7 GB with BF16 ones, over the 141 GB.
    k3 = load_model("kimi-k3-like")
    check_memory(k3, H200, Layout(tp=1, ep=16, weights=Precision.FP4))
    with pytest.raises(LayoutError, match=r"168\.7 GB of weights per GPU > 141\.0 GB"):
        check_memory(k3, H200, Layout(tp=1, ep=16, weights=Precision.FP4,
                                      attention_weights=Precision.BF16))


def test_unset_mtp_takes_the_model_default_when_bound():
    unset = Layout(tp=8, ep=8, mtp_from_model=True)
    assert unset.with_model_defaults(DS).mtp == 1
    assert not unset.with_model_defaults(DS).mtp_from_model
    assert unset.with_model_defaults(load_model("kimi-k3-like")).mtp == 0
    chosen = Layout(tp=8, ep=8, mtp=3)
    assert chosen.with_model_defaults(DS) is chosen
