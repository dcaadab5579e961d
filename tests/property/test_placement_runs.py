"""`Placement.add_run` and `remove_run` (which work out a holder set's successor once
for each change of set along the run) against a plain model kept blob by blob: a set of
places a blob, and each place's blobs with their use times in the order they came.
Runs mix blobs of different holder sets, alternating and repeating, as a chain written
on two nodes does."""

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.placement import Placement
from storage.tiers import Location, StoreLayout, Tier, TierSpec

PLACES = (Location(Tier.HBM, "w0"), Location(Tier.HBM, "w1"), Location(Tier.DRAM, "n0"),
          Location(Tier.DRAM, "n1"), Location(Tier.PFS, "pfs"))


def make_placement() -> Placement:
    layout = StoreLayout.build([(loc, TierSpec(loc.tier, 10**12, 1.0, 1.0), None)
                                for loc in PLACES])
    return Placement(layout)


ops = st.lists(st.tuples(st.booleans(), st.sampled_from(PLACES),
                         st.lists(st.integers(0, 15), unique=True, min_size=1, max_size=12)),
               max_size=40)


@settings(max_examples=400, deadline=None)
@given(ops=ops)
def test_runs_change_the_placement_as_blob_by_blob(ops):
    placement = make_placement()
    held: dict[int, set[Location]] = {}  # the model: a blob's places
    at: dict[Location, dict[int, float]] = {loc: {} for loc in PLACES}
    for now_s, (adding, place, ids) in enumerate(ops):
        if adding:
            ids = [b for b in ids if b not in at[place]]
            placement.add_run(tuple(ids), place, len(ids), float(now_s))
            for blob_id in ids:
                at[place][blob_id] = float(now_s)
                held.setdefault(blob_id, set()).add(place)
        else:
            ids = [b for b in ids if b in at[place]]
            gone = placement.remove_run(ids, place, len(ids))
            expect_gone = []
            for blob_id in ids:
                del at[place][blob_id]
                held[blob_id].discard(place)
                if not held[blob_id]:
                    del held[blob_id]
                    expect_gone.append(blob_id)
            assert gone == expect_gone
        assert {b: set(s) for b, s in placement.copies.items()} == held
        for loc in PLACES:
            assert list(placement.at[loc].items()) == list(at[loc].items())
            assert placement.used_bytes[loc] == len(at[loc])
        # One shared set per distinct set of places, its tiers known.
        for s in placement.copies.values():
            assert placement.shared_set(s) is s
            assert placement.fastest_tier[s] == min(s).tier
            assert placement.slowest_tier[s] == max(s).tier
