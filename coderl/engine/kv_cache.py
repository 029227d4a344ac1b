"""Per-sequence KV caches, the running batch's rows of KV, and the per-session prefix cache (LRU,
bounded in bytes).

A sequence's cache is either a tensor of its own (``decode_attention=per_sequence``: each sequence
grows its own, and attention runs per sequence) or a row of :class:`KVRows`, one tensor holding every
running sequence (``batched``: the decode step attends over all rows in one call). In both cases
``SequenceKV.data`` is ``[layers, 2, kv_heads, capacity, head_dim]``, so a prefill writes and reads
it the same way. A finished sequence leaves its row with a copy of its own (for the prefix cache).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from coderl.errors import EngineError

_GROW = 256  # capacity grows in multiples of this many tokens (and at least doubles)


@dataclass
class KVLayout:
    """Shape of one sequence's cache: [layers, 2 (k, v), kv_heads, capacity, head_dim]."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device

    def bytes_per_token(self) -> int:
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * itemsize


@dataclass
class SequenceKV:
    """The KV cache of one sequence; ``tokens[i]`` is the id whose keys/values sit at position i."""

    layout: KVLayout
    tokens: list[int] = field(default_factory=list)
    data: torch.Tensor | None = None
    rows: KVRows | None = None
    """The running batch's rows this sequence lives in (None: ``data`` is its own tensor)."""
    row: int = -1
    aligned: int = 0
    """Leading positions whose KV was computed in whole batch-invariant prompt pieces from the start
    (``engine.invariant_chunk``): a function of those tokens alone, which another invariant request
    with the same tokens may take as its own."""

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def capacity(self) -> int:
        return 0 if self.data is None else int(self.data.shape[3])

    @property
    def nbytes(self) -> int:
        return self.capacity * self.layout.bytes_per_token()

    def reserve(self, total: int) -> None:
        """Make room for ``total`` positions, keeping what is stored."""
        if total <= self.capacity:
            return
        if self.rows is not None:
            self.rows.grow(total)
            return
        new_cap = max(total, 2 * self.capacity)
        new_cap = -(-new_cap // _GROW) * _GROW
        lay = self.layout
        data = torch.empty(
            (lay.num_layers, 2, lay.num_kv_heads, new_cap, lay.head_dim), dtype=lay.dtype, device=lay.device
        )
        if self.data is not None and self.length:
            data[:, :, :, : self.length] = self.data[:, :, :, : self.length]
        self.data = data

    def truncate(self, length: int) -> None:
        """Forget positions from ``length`` on (they are overwritten later)."""
        del self.tokens[length:]
        self.aligned = min(self.aligned, length)


class KVRows:
    """The KV of the running batch: ``data`` is ``[layers, 2, rows + 1, kv_heads, capacity, head_dim]``,
    one row per running sequence (the last row is scratch, written by padded batch entries).

    The capacity is the longest sequence's so far, rounded up (and at least doubled when it grows),
    so every row pads to it: the price of one attention call over the whole batch. It is kept while
    the engine runs (no reallocation, and no CUDA graph captured again, per request) until :meth:`free`
    (the engine's weights released); ``max_len``
    bounds it (no sequence is longer than the engine's ``max_model_len``). ``generation`` changes whenever
    ``data`` is reallocated, which invalidates anything holding its address (CUDA graphs).
    """

    def __init__(self, layout: KVLayout, rows: int, max_len: int) -> None:
        self.layout = layout
        self.rows = rows
        self.max_len = max_len
        self.data: torch.Tensor | None = None
        self.generation = 0
        self._free = list(range(rows - 1, -1, -1))
        self._bound: dict[int, SequenceKV] = {}

    @property
    def scratch(self) -> int:
        """The row that padded batch entries write into."""
        return self.rows

    @property
    def capacity(self) -> int:
        return 0 if self.data is None else int(self.data.shape[4])

    def __len__(self) -> int:
        return len(self._bound)

    # Every method that makes or writes the rows runs in inference mode: the engine grows them inside
    # its (inference-mode) forward pass and binds sequences outside it, and torch refuses an in-place
    # write to an inference tensor outside inference mode (found on a GPU: a session's second turn,
    # after its first had grown the rows, killed the engine thread).
    @torch.inference_mode()
    def bind(self, kv: SequenceKV) -> None:
        """Move ``kv`` (positions ``[0, kv.length)`` kept) into a free row."""
        if kv.rows is not None:
            raise ValueError("this sequence already lives in a row")
        if not self._free:
            raise RuntimeError(f"all {self.rows} KV rows are taken; the batch is larger than max_batch_size")
        self.grow(max(kv.length, 1))
        assert self.data is not None
        row = self._free.pop()
        if kv.length and kv.data is not None:
            self.data[:, :, row, :, : kv.length] = kv.data[:, :, :, : kv.length]
        kv.data = self.data[:, :, row]  # [L, 2, KVH, capacity, D]
        kv.rows, kv.row = self, row
        self._bound[row] = kv

    @torch.inference_mode()
    def release(self, kv: SequenceKV, keep: bool) -> None:
        """Free ``kv``'s row; with ``keep`` its KV moves to a tensor of its own (for the prefix cache)."""
        if kv.rows is not self:
            raise ValueError("this sequence does not live in these rows")
        del self._bound[kv.row]
        self._free.append(kv.row)
        assert kv.data is not None
        kv.data = kv.data[:, :, :, : kv.length].clone() if keep and kv.length else None
        kv.rows, kv.row = None, -1

    def release_all(self) -> None:
        """Forget every row (the engine failed or stopped its whole batch)."""
        for kv in self._bound.values():
            kv.data, kv.rows, kv.row = None, None, -1
        self._bound.clear()
        self._free = list(range(self.rows - 1, -1, -1))

    def free(self) -> None:
        """Drop the rows' storage while no sequence lives in them (the next :meth:`bind` allocates it
        again, at the size it then needs)."""
        if self._bound:
            raise RuntimeError(f"{len(self._bound)} sequences still live in the KV rows")
        if self.data is not None:
            self.data = None
            self.generation += 1

    @torch.inference_mode()
    def grow(self, total: int) -> None:
        """Make every row hold at least ``total`` positions (reallocating, and re-pointing the rows)."""
        cap = self.capacity
        if total <= cap:
            return
        if total > self.max_len:
            raise ValueError(f"{total} positions exceed the rows' limit of {self.max_len}")
        new_cap = min(-(-max(total, 2 * cap) // _GROW) * _GROW, self.max_len)
        lay = self.layout
        try:
            # zeros, not empty: a row's positions past its length are read (and masked) by the batched
            # attention, and masked garbage must be finite (NaN times a zero weight is still NaN)
            data = torch.zeros(
                (lay.num_layers, 2, self.rows + 1, lay.num_kv_heads, new_cap, lay.head_dim),
                dtype=lay.dtype,
                device=lay.device,
            )
        except RuntimeError as exc:  # out of memory (torch.OutOfMemoryError is a RuntimeError)
            need = (self.rows + 1) * new_cap * lay.bytes_per_token()
            raise EngineError(
                f"cannot hold the batch's KV rows: {self.rows + 1} rows x {new_cap} positions x "
                f"{lay.bytes_per_token() / 1024:.0f} KiB = {need / 2**30:.1f} GiB on {lay.device} ({exc}); lower "
                "engine.max_batch_size or engine.max_model_len, or set engine.decode_attention=per_sequence "
                "(no padding)"
            ) from exc
        if self.data is not None:
            for row, kv in self._bound.items():
                if kv.length:
                    data[:, :, row, :, : kv.length] = self.data[:, :, row, :, : kv.length]
        self.data = data
        self.generation += 1
        for row, kv in self._bound.items():
            kv.data = data[:, :, row]


@torch.inference_mode()
def copy_prefix(source: SequenceKV, tokens: list[int], layout: KVLayout) -> SequenceKV:
    """A new sequence holding ``source``'s KV of ``tokens`` (its first ``len(tokens)`` positions, which
    ``source`` has computed for exactly these ids): another session's shared prompt, not prefilled again."""
    n = len(tokens)
    if source.data is None or source.length < n or source.tokens[:n] != tokens:
        raise ValueError("the source sequence does not hold these tokens")
    kv = SequenceKV(layout)
    kv.reserve(n)
    assert kv.data is not None
    kv.data[:, :, :, :n] = source.data[:, :, :, :n]
    kv.tokens = list(tokens)
    kv.aligned = min(source.aligned, n)
    return kv


class PrefixCache:
    """session_id -> the KV of that session's last turn; least recently used entries evicted first.

    A request takes its session's entry out (it owns and extends the tensor while it runs) and puts
    it back when it finishes, so an entry is never shared by two running requests.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, SequenceKV] = OrderedDict()
        self._bytes = 0
        self._donor: str | None = None
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._entries

    def take(self, session_id: str) -> SequenceKV | None:
        kv = self._entries.pop(session_id, None)
        if kv is None:
            self.misses += 1
            return None
        self.hits += 1
        self._bytes -= kv.nbytes
        return kv

    def put(self, session_id: str, kv: SequenceKV) -> None:
        if not self.enabled or kv.nbytes > self.max_bytes:
            return
        old = self._entries.pop(session_id, None)
        if old is not None:
            self._bytes -= old.nbytes
        self._entries[session_id] = kv
        self._bytes += kv.nbytes
        while self._bytes > self.max_bytes and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.nbytes
            self.evictions += 1

    def end(self, session_id: str) -> None:
        """The session sends no more turns: its entry is dropped, unless it is the newest ended one,
        which stays (LRU as ever) as a donor of prompt prefixes for later sessions (``share_prompts``);
        the one it replaces is dropped. So finished sessions hold at most one entry, not the budget."""
        if session_id not in self._entries:
            return
        donor, self._donor = self._donor, session_id
        if donor is not None and donor != session_id and (old := self._entries.pop(donor, None)) is not None:
            self._bytes -= old.nbytes

    def entries(self) -> list[SequenceKV]:
        """Every cached sequence (to share a prompt prefix with a new session; never taken out)."""
        return list(self._entries.values())

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
        self._donor = None
