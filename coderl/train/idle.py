"""How long the engine had nothing to do: an engine view that clocks the time with no request out."""

from __future__ import annotations

import time

from coderl.engine.base import Engine, EngineView
from coderl.engine.params import SamplingParams
from coderl.types import Completion


class IdleClock(EngineView):
    """Passes requests through and adds up the seconds during which none was waiting or running
    (the engine idle: in synchronous training, the whole update; in asynchronous, what is left)."""

    def __init__(self, inner: Engine) -> None:
        super().__init__(inner)
        self._out = 0
        self._idle = 0.0
        self._idle_from: float | None = time.perf_counter()

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None = None
    ) -> Completion:
        if self._out == 0 and self._idle_from is not None:
            self._idle += time.perf_counter() - self._idle_from
            self._idle_from = None
        self._out += 1
        try:
            return await self.inner.generate(prompt_ids, params, session_id=session_id)
        finally:
            self._out -= 1
            if self._out == 0:
                self._idle_from = time.perf_counter()

    def idle_s(self, now: float | None = None) -> float:
        """Idle seconds from when this view was made to ``now`` (a ``time.perf_counter()`` reading
        taken with no await since; by default, this moment). Passing the reading that also times a
        window keeps the idle seconds within it: an idle fraction is never above 1."""
        if now is None:
            now = time.perf_counter()
        return self._idle + (now - self._idle_from if self._idle_from is not None else 0.0)
