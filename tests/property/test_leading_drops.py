"""`storage.offload.leading_drops` (found with C passes and shortcuts) against its
definition walked blob by blob: the copies at the place, not pinned, that have a slower
copy, up to the first that has none; and the ids from that one on."""

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.offload import leading_drops
from storage.placement import Placement
from storage.tiers import Location, StoreLayout, Tier, TierSpec

HBM = Location(Tier.HBM, "w0")
HBM1 = Location(Tier.HBM, "w1")
DRAM = Location(Tier.DRAM, "n0")
PFS = Location(Tier.PFS, "pfs")
PLACES = (HBM, HBM1, DRAM, PFS)


def make_placement() -> Placement:
    return Placement(StoreLayout.build([(loc, TierSpec(loc.tier, 10**12, 1.0, 1.0), None)
                                        for loc in PLACES]))


def by_definition(placement, pins, ids, src):
    here = placement.at[src]
    drops = []
    for i, blob_id in enumerate(ids):
        if blob_id not in here or blob_id in pins:
            continue
        if max(placement.copies[blob_id]).tier <= src.tier:  # no slower copy
            return drops, tuple(ids[i:])
        drops.append(blob_id)
    return drops, ()


# Each blob: whether the place holds it, and which other places do.
blobs = st.lists(st.tuples(st.booleans(), st.sets(st.sampled_from((HBM1, DRAM, PFS)))),
                 min_size=0, max_size=14)


@settings(max_examples=500, deadline=None)
@given(blobs=blobs, data=st.data())
def test_leading_drops_as_walked_blob_by_blob(blobs, data):
    placement = make_placement()
    for blob_id, (here, others) in enumerate(blobs):
        places = ([HBM] if here else []) + sorted(others)
        for place in places:
            placement.add(blob_id, place, 1, 0.0)
    with_copies = [b for b in range(len(blobs)) if b in placement.copies]
    ids = tuple(sorted(data.draw(st.sets(st.sampled_from(with_copies))) if with_copies
                       else ()))
    pinned = data.draw(st.sets(st.sampled_from(ids))) if ids else set()
    pins = dict.fromkeys(pinned, 1)
    drops, rest = leading_drops(placement, pins, ids, HBM)
    assert (list(drops), tuple(rest)) == by_definition(placement, pins, ids, HBM)
