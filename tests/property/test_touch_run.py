"""`Placement.touch_run` given a tuple (which skips a chain already the most recently
used there, in order, found in C) against the same touch given a list (blob by blob):
the use order and times must end the same."""

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.placement import Placement
from storage.tiers import Location, StoreLayout, Tier, TierSpec

HBM = Location(Tier.HBM, "w0")


def placement_with(uses: list[tuple[int, float]]) -> Placement:
    layout = StoreLayout.build([(HBM, TierSpec(Tier.HBM, 10**9, 1.0, 1.0), None)])
    placement = Placement(layout)
    for blob_id, used_s in uses:
        placement.add(blob_id, HBM, 1, used_s)
    return placement


uses = st.lists(st.tuples(st.integers(0, 12), st.sampled_from([0.0, 1.0, 2.0, 3.0])),
                unique_by=lambda u: u[0], max_size=10)


@settings(max_examples=400, deadline=None)
@given(uses=uses, data=st.data(), now_s=st.sampled_from([0.0, 1.0, 2.0, 3.0, 4.0]))
def test_a_tuple_touches_as_blob_by_blob(uses, data, now_s):
    ids = [u[0] for u in uses]
    if ids and data.draw(st.booleans()):  # most often in the replay: the last few, in order
        chain = ids[len(ids) - data.draw(st.integers(1, len(ids))):]
    else:
        chain = data.draw(st.lists(st.integers(0, 14), unique=True, max_size=6))
    fast, plain = placement_with(uses), placement_with(uses)
    fast.touch_run(tuple(chain), HBM, now_s)
    plain.touch_run(list(chain), HBM, now_s)
    assert list(fast.at[HBM].items()) == list(plain.at[HBM].items())
