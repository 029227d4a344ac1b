"""seqkit: small algorithms on lists and sequences."""

from seqkit.search import (
    argmax, argmin, binary_search, find_duplicates, is_sorted, lower_bound, majority, second_largest,
)
from seqkit.stats import count_inversions, cumulative_sums, longest_increasing_run, moving_average, range_summary, top_k
from seqkit.transform import (
    dedupe_consecutive, interleave, merge_sorted, pad_to, rotate, run_length_decode, run_length_encode, split_at,
    transpose,
)

__all__ = [
    "argmax", "argmin", "binary_search", "count_inversions", "cumulative_sums", "dedupe_consecutive",
    "find_duplicates", "interleave", "is_sorted", "longest_increasing_run", "lower_bound", "majority",
    "merge_sorted", "moving_average", "pad_to", "range_summary", "rotate", "run_length_decode",
    "run_length_encode", "second_largest", "split_at", "top_k", "transpose",
]
