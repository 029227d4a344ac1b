"""One actor's peak memory for a training step, in a process of its own (a process's high-water mark
only grows, so each micro-batch size is measured in a fresh process):

    python -m coderl.bench.train_peak ACTOR_JSON MODEL_PATH SEED

``ACTOR_JSON`` is an ``actor`` section (its ``micro_batch_tokens`` and ``gradient_checkpointing`` are
what varies). Two train steps over the bench's variable-length batch (8 sequences of 128 to 1024
tokens); prints one JSON object: the peak resident set after loading the actor and after the steps,
in MB, and the second step's seconds.

The peak is the kernel's ``VmHWM`` (:func:`coderl.memory.peak_rss_mb`), not ``ru_maxrss``: Linux
carries ``ru_maxrss`` over ``fork`` and ``exec``, so a child of the bench process (2.5 GB after its
own packed and padded steps) reported at least the parent's peak, whatever it used itself.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from coderl.memory import peak_rss_mb as peak_mb
from coderl.train.config import ActorConfig


def main(argv: list[str]) -> None:
    from coderl.bench.train import _nll, variable_batch
    from coderl.memory import bound_heap
    from coderl.train.actor import Actor

    bound_heap()  # as every coderl command does
    cfg = ActorConfig.model_validate(json.loads(argv[0]))
    actor = Actor(cfg, Path(argv[1]) if argv[1] else None, None)
    actor.setup()
    loaded = peak_mb()
    seqs, starts = variable_batch(int(actor.model.config.vocab_size), 8, 128, 1024, seed=int(argv[2]))
    loss = _nll(sum(len(s) - st for s, st in zip(seqs, starts, strict=True)))
    seconds = []
    for _ in range(2):  # the second step is the steady state: the optimizer's state exists by then
        t0 = time.perf_counter()
        actor.train_step(seqs, starts, 1.0, loss)
        seconds.append(time.perf_counter() - t0)
    print(json.dumps({"loaded_mb": loaded, "peak_mb": peak_mb(), "step_s": seconds[-1]}))


if __name__ == "__main__":
    main(sys.argv[1:])
