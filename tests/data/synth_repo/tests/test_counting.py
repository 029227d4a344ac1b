import pytest

from romankit import chunks, clamp, running_total


def test_clamp():
    assert clamp(5, 0, 10) == 5
    assert clamp(-3, 0, 10) == 0
    assert clamp(12, 0, 10) == 10


def test_clamp_bad_bounds():
    with pytest.raises(ValueError):
        clamp(1, 5, 2)


def test_running_total():
    assert running_total([1, 2, 3]) == [1, 3, 6]
    assert running_total([1, 2], start=10) == [11, 13]


def test_chunks():
    assert chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert chunks([], 3) == []
    with pytest.raises(ValueError):
        chunks([1], 0)
