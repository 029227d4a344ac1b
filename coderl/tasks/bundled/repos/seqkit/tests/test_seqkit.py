import pytest

from seqkit import (
    argmax, argmin, binary_search, count_inversions, cumulative_sums, dedupe_consecutive, find_duplicates,
    interleave, is_sorted, longest_increasing_run, lower_bound, majority, merge_sorted, moving_average, pad_to,
    range_summary, rotate, run_length_decode, run_length_encode, second_largest, split_at, top_k, transpose,
)


def test_binary_search():
    assert binary_search([1, 3, 5, 7], 5) == 2
    assert binary_search([1, 3, 5, 7], 1) == 0
    assert binary_search([1, 3, 5, 7], 7) == 3
    assert binary_search([1, 3, 5, 7], 4) == -1
    assert binary_search([2], 2) == 0
    assert binary_search([], 2) == -1


def test_lower_bound():
    assert lower_bound([1, 2, 2, 3], 2) == 1
    assert lower_bound([1, 2, 2, 3], 2.5) == 3
    assert lower_bound([1, 2, 2, 3], 0) == 0
    assert lower_bound([1, 2, 2, 3], 4) == 4
    assert lower_bound([], 5) == 0


def test_argmax():
    assert argmax([1, 5, 2]) == 1
    assert argmax([3, 1, 3]) == 0
    assert argmax([-1, -5]) == 0
    assert argmax([7]) == 0
    with pytest.raises(ValueError):
        argmax([])


def test_argmin():
    assert argmin([4, 0, 2]) == 1
    assert argmin([1, 3, 1]) == 0
    assert argmin([-1, -5]) == 1
    assert argmin([7]) == 0
    with pytest.raises(ValueError):
        argmin([])


def test_find_duplicates():
    assert find_duplicates([1, 2, 1, 3, 2, 1]) == [1, 2]
    assert find_duplicates(["b", "a", "a", "b"]) == ["a", "b"]
    assert find_duplicates([4, 4, 4]) == [4]
    assert find_duplicates([1, 2, 3]) == []
    assert find_duplicates([]) == []


def test_majority():
    assert majority([1, 2, 1, 1]) == 1
    assert majority([2, 1, 1]) == 1
    assert majority([1, 2, 1, 2]) is None
    assert majority([5]) == 5
    assert majority([]) is None


def test_second_largest():
    assert second_largest([3, 1, 2]) == 2
    assert second_largest([1, 2, 3]) == 2
    assert second_largest([5, 5, 4]) == 4
    assert second_largest([-1, -3, -2]) == -2
    assert second_largest([7, 7]) is None
    assert second_largest([], "none") == "none"


def test_is_sorted():
    assert is_sorted([1, 2, 2, 3]) is True
    assert is_sorted([1, 2, 2, 3], strict=True) is False
    assert is_sorted([1, 2, 3], strict=True) is True
    assert is_sorted([2, 1, 3]) is False
    assert is_sorted([]) is True


def test_rotate():
    assert rotate([1, 2, 3, 4], 1) == [4, 1, 2, 3]
    assert rotate([1, 2, 3, 4], -1) == [2, 3, 4, 1]
    assert rotate([1, 2, 3, 4], 6) == [3, 4, 1, 2]
    assert rotate([1, 2, 3, 4], 0) == [1, 2, 3, 4]
    assert rotate([1, 2, 3, 4], 4) == [1, 2, 3, 4]
    assert rotate([], 3) == []


def test_interleave():
    assert interleave([1, 2, 3], ["a", "b"]) == [1, "a", 2, "b", 3]
    assert interleave([1], ["a", "b", "c"]) == [1, "a", "b", "c"]
    assert interleave([1, 2], [3, 4]) == [1, 3, 2, 4]
    assert interleave([], []) == []


def test_run_length_encode():
    assert run_length_encode("aaab") == [("a", 3), ("b", 1)]
    assert run_length_encode([1, 1, 2, 1]) == [(1, 2), (2, 1), (1, 1)]
    assert run_length_encode([7, 7, 7, 2, 2]) == [(7, 3), (2, 2)]
    assert run_length_encode([5]) == [(5, 1)]
    assert run_length_encode([]) == []


def test_run_length_decode():
    assert run_length_decode([("a", 2), ("b", 1)]) == ["a", "a", "b"]
    assert run_length_decode([("x", 0), ("y", 1)]) == ["y"]
    assert run_length_decode([]) == []
    with pytest.raises(ValueError):
        run_length_decode([("x", -1)])


def test_merge_sorted():
    assert merge_sorted([1, 3, 5], [2, 4]) == [1, 2, 3, 4, 5]
    assert merge_sorted([], [1]) == [1]
    assert merge_sorted([1, 2], []) == [1, 2]
    assert merge_sorted([4], [1, 2]) == [1, 2, 4]
    assert str(merge_sorted([2.0], [2])) == "[2.0, 2]"


def test_dedupe_consecutive():
    assert dedupe_consecutive([1, 1, 2, 2, 1]) == [1, 2, 1]
    assert dedupe_consecutive("aab") == ["a", "b"]
    assert dedupe_consecutive([3]) == [3]
    assert dedupe_consecutive([]) == []


def test_transpose():
    assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]
    assert transpose([[1], [2]]) == [[1, 2]]
    assert transpose([[1]]) == [[1]]
    assert transpose([]) == []
    with pytest.raises(ValueError):
        transpose([[1, 2], [3]])


def test_split_at():
    assert split_at([1, 2, 3, 4, 5], [2, 4]) == [[1, 2], [3, 4], [5]]
    assert split_at([1, 2], []) == [[1, 2]]
    assert split_at([1, 2], [0]) == [[], [1, 2]]
    assert split_at([1, 2], [2]) == [[1, 2], []]
    with pytest.raises(ValueError):
        split_at([1, 2], [3])
    with pytest.raises(ValueError):
        split_at([1, 2, 3], [2, 1])


def test_pad_to():
    assert pad_to([1, 2], 4) == [1, 2, None, None]
    assert pad_to([1, 2], 4, 0, True) == [0, 0, 1, 2]
    assert pad_to([1, 2, 3], 2) == [1, 2]
    assert pad_to([1, 2, 3], 2, left=True) == [2, 3]
    assert pad_to([1, 2], 0, left=True) == []
    with pytest.raises(ValueError):
        pad_to([1], -1)


def test_cumulative_sums():
    assert cumulative_sums([1, 2, 3]) == [1, 3, 6]
    assert cumulative_sums([5, -2], 10) == [15, 13]
    assert cumulative_sums([0]) == [0]
    assert cumulative_sums([]) == []


def test_moving_average():
    assert moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]
    assert moving_average([1, 2, 3], 3) == [2.0]
    assert moving_average([4, -4], 1) == [4.0, -4.0]
    assert moving_average([1, 2], 3) == []
    with pytest.raises(ValueError):
        moving_average([1, 2], 0)


def test_longest_increasing_run():
    assert longest_increasing_run([1, 2, 1, 2, 3, 0]) == [1, 2, 3]
    assert longest_increasing_run([3, 4, 1, 2]) == [3, 4]
    assert longest_increasing_run([1, 1, 2]) == [1, 2]
    assert longest_increasing_run([5, 4, 3]) == [5]
    assert longest_increasing_run([-3, -2, -1]) == [-3, -2, -1]
    assert longest_increasing_run([]) == []


def test_count_inversions():
    assert count_inversions([2, 1]) == 1
    assert count_inversions([3, 2, 1]) == 3
    assert count_inversions([1, 3, 2, 4]) == 1
    assert count_inversions([1, 1]) == 0
    assert count_inversions([]) == 0


def test_top_k():
    assert top_k([3, 1, 4, 1, 5], 2) == [5, 4]
    assert top_k([1, 2], 5) == [2, 1]
    assert top_k([1, 2], 0) == []
    assert str(top_k([2, 2.0, 1], 2)) == "[2, 2.0]"
    with pytest.raises(ValueError):
        top_k([1], -1)


def test_range_summary():
    assert range_summary([1, 2, 3, 5, 7, 8]) == "1-3,5,7-8"
    assert range_summary([3, 1, 2, 2]) == "1-3"
    assert range_summary([1, 3]) == "1,3"
    assert range_summary([4]) == "4"
    assert range_summary([]) == ""
