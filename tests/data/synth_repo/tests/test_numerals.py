import pytest

from romankit import from_roman, to_roman


def test_small_numbers():
    assert to_roman(1) == "I"
    assert to_roman(4) == "IV"
    assert to_roman(9) == "IX"


def test_large_numbers():
    assert to_roman(1994) == "MCMXCIV"
    assert to_roman(3999) == "MMMCMXCIX"


def test_out_of_range():
    with pytest.raises(ValueError):
        to_roman(0)
    with pytest.raises(ValueError):
        to_roman(4000)


def test_parse():
    assert from_roman("MCMXCIV") == 1994
    assert from_roman("xiv") == 14


def test_parse_rejects_junk():
    with pytest.raises(ValueError):
        from_roman("XQ")


def test_round_trip():
    for n in (1, 8, 40, 444, 2023):
        assert from_roman(to_roman(n)) == n
