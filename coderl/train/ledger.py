"""An independent record of what the engine sampled, to check every training batch against.

:class:`SampledLedger` wraps the engine during rollouts and remembers each completion's token ids
under a digest of the exact prompt it answered. :meth:`SampledLedger.verify` then walks a trajectory:
every run of mask-1 tokens must be exactly the ids the engine returned for the context before it
(``prompt_ids + response_ids[:start]``), with exactly the logprobs it returned for them. A trajectory
that fails is never trained on: its tokens were not sampled by the policy, its context is not what
the engine saw, or its logprobs are not the sampling distribution's (they weigh every token's update).
"""

from __future__ import annotations

import hashlib

from coderl.engine.base import Engine, EngineView
from coderl.engine.params import SamplingParams
from coderl.types import Completion, Trajectory


def _digest(ids: list[int]) -> bytes:
    return hashlib.blake2b(repr(ids).encode(), digest_size=16).digest()


Sampled = tuple[list[int], list[float]]
"""One recorded completion: its token ids and their logprobs."""


class SampledLedger(EngineView):
    """An engine view recording ``digest(prompt) -> sampled ids`` for every completion."""

    def __init__(self, inner: Engine) -> None:
        super().__init__(inner)
        self.sampled: dict[bytes, list[Sampled]] = {}

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None = None
    ) -> Completion:
        completion = await self.inner.generate(prompt_ids, params, session_id=session_id)
        self.sampled.setdefault(_digest(prompt_ids), []).append(
            (list(completion.token_ids), list(completion.logprobs))
        )
        return completion

    def clear(self) -> None:
        self.sampled.clear()

    def forget(self, traj: Trajectory) -> None:
        """Drop the completions ``traj``'s model tokens were matched to (asynchronous training checks
        each trajectory once, while others are still being sampled, so the ledger is never cleared whole)."""
        for key, entry in self._walk(traj)[1]:
            entries = self.sampled[key]
            entries.remove(entry)
            if not entries:
                del self.sampled[key]

    def verify(self, traj: Trajectory) -> str | None:
        """None when every mask-1 run of ``traj`` is exactly what the engine sampled after exactly
        that context, with the logprobs it returned; otherwise what is wrong."""
        return self._walk(traj)[0]

    def _walk(self, traj: Trajectory) -> tuple[str | None, list[tuple[bytes, Sampled]]]:
        """(what is wrong or None, the recorded completions matched up to there, each with its key)."""
        ids, mask = traj.response_ids, traj.response_mask
        if not (len(ids) == len(mask) == len(traj.logprobs)):
            return f"response_ids/mask/logprobs lengths differ: {len(ids)}/{len(mask)}/{len(traj.logprobs)}", []
        matched: list[tuple[bytes, Sampled]] = []
        i = 0
        while i < len(ids):
            if mask[i] != 1:
                i += 1
                continue
            j = i
            while j < len(ids) and mask[j] == 1:
                j += 1
            key = _digest(traj.prompt_ids + ids[:i])
            candidates = [c for c in self.sampled.get(key, []) if c[0]]
            run = ids[i:j]
            # one call's tokens, or the start of the next call's too (no environment tokens between);
            # samples of one prompt (a group) may repeat each other's tokens with other logprobs
            # (batched arithmetic differs by batch), so the pair is matched, not the tokens alone
            same_tokens = [c for c in candidates if run[: len(c[0])] == c[0]]
            if not same_tokens:
                return f"model tokens at response[{i}:{j}] were not sampled by the engine after that context", matched
            match = next((c for c in same_tokens if traj.logprobs[i : i + len(c[0])] == c[1]), None)
            if match is None:
                n = len(same_tokens[0][0])
                return (
                    f"logprobs at response[{i}:{i + n}] are not the ones the engine returned with those tokens",
                    matched,
                )
            matched.append((key, match))
            i += len(match[0])
        return None, matched
