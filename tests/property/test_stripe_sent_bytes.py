"""A stripe's bytes per holder summed over a run of copies equal the copies' shares
worked out one by one (each holder but the first its rate's share rounded down, the
first the rest), as whole bytes."""

from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st

from storage.stripes import SentByChain, Stripe, add_sent


def _one_by_one(rates: list[float], sizes: list[int]) -> list[int]:
    total_rate = sum(rates)
    sent = [0] * len(rates)
    for n in sizes:
        shares = [n * r // total_rate for r in rates]
        shares[0] += n - sum(int(s) for s in shares)
        for i, share in enumerate(shares):
            sent[i] += int(share)
    return sent


def _stripe(rates: list[float]) -> Stripe:
    return Stripe(tuple(range(len(rates))), rates, sum(rates))


@given(st.lists(st.floats(1e6, 1e13, allow_nan=False), min_size=1, max_size=5),
       st.lists(st.integers(0, 1 << 40), max_size=40))
def test_sent_bytes_equal_the_shares_one_copy_at_a_time(rates, sizes):
    stripe = _stripe(rates)
    for _ in range(2):  # the second time from the shares it keeps
        sent = stripe.sent_bytes(sizes)
        assert sent == _one_by_one(rates, sizes)
        assert sum(sent) == sum(sizes)


@st.composite
def _loads(draw):
    """Loads to one place as a session makes them: each a chain that goes on from one
    loaded before (or starts anew), with a few holder sets between its blobs, some of
    whose stripes change from one load to the next."""
    stripes = [_stripe(rates) for rates in ([2e9], [1e9, 3e9], [5e8, 5e8, 1e9])]
    sizes: dict[int, int] = {}
    chains: list[tuple[list[int], list[Stripe]]] = []
    loads = []
    next_id = 0
    for _ in range(draw(st.integers(1, 12))):
        ids: list[int] = []
        striped: list[Stripe] = []
        if chains and draw(st.booleans()):
            ids, striped = map(list, draw(st.sampled_from(chains)))
            cut = draw(st.integers(0, len(ids)))
            ids, striped = ids[:cut], striped[:cut]
            if striped and draw(st.integers(0, 3)) == 0:  # a blob moved since
                striped[draw(st.integers(0, len(striped) - 1))] = draw(st.sampled_from(stripes))
        for _ in range(draw(st.integers(0 if ids else 1, 4))):
            sizes[next_id] = draw(st.integers(1, 1 << 32))
            ids.append(next_id)
            striped.append(draw(st.sampled_from(stripes)))
            next_id += 1
        chains.append((ids, striped))
        loads.append((ids, [sizes[b] for b in ids], striped))
    return loads


@given(_loads(), st.sampled_from([256, 1]))
def test_the_sums_kept_by_chain_are_those_added_up_anew(loads, kept):
    memo = SentByChain()
    # (With one load kept, the kept ones are trimmed every few loads.)
    with patch("storage.stripes._CHAINS_KEPT", kept):
        for ids, sizes, striped in loads:
            anew: dict = {}
            add_sent(anew, sizes, striped)
            assert memo.sent(list(ids), sizes, list(striped)) == anew
