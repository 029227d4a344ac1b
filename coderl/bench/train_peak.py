"""One actor's peak memory for a training step, in a process of its own (``ru_maxrss`` only grows, so
each micro-batch size is measured in a fresh process):

    python -m coderl.bench.train_peak ACTOR_JSON MODEL_PATH SEED

``ACTOR_JSON`` is an ``actor`` section (its ``micro_batch_tokens`` and ``gradient_checkpointing`` are
what varies). Two train steps over the bench's variable-length batch (8 sequences of 128 to 1024
tokens); prints one JSON object: the peak resident set after loading the actor and after the steps,
in MB.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

from coderl.train.config import ActorConfig


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main(argv: list[str]) -> None:
    from coderl.bench.train import _nll, variable_batch
    from coderl.train.actor import Actor

    cfg = ActorConfig.model_validate(json.loads(argv[0]))
    actor = Actor(cfg, Path(argv[1]) if argv[1] else None, None)
    actor.setup()
    loaded = peak_mb()
    seqs, starts = variable_batch(int(actor.model.config.vocab_size), 8, 128, 1024, seed=int(argv[2]))
    loss = _nll(sum(len(s) - st for s, st in zip(seqs, starts, strict=True)))
    for _ in range(2):
        actor.train_step(seqs, starts, 1.0, loss)
    print(json.dumps({"loaded_mb": loaded, "peak_mb": peak_mb()}))


if __name__ == "__main__":
    main(sys.argv[1:])
