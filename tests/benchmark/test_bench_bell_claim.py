"""The priority benchmark's count (``python -m bench.bell_claim``): what an inversion is."""

from bench.bell_claim import inversions


def test_inversions__count_pairs_started_lower_priority_before_higher():
    assert inversions([20, 10, 0, 0, -10]) == 0
    assert inversions([0, 20]) == 1
    assert inversions([-10, 0, 20]) == 3
    assert inversions([10, 10, 20]) == 2
