"""A stripe's bytes per holder summed over a run of copies equal the copies' shares
worked out one by one (each holder but the first its rate's share rounded down, the
first the rest), as whole bytes."""

from hypothesis import given
from hypothesis import strategies as st

from storage.stripes import Stripe


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
