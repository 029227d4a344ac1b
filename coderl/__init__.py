"""coderl: train coding agents with reinforcement learning from verifiable rewards."""

import sys as _sys

from coderl.threads import bound_primitive_cache as _bound_primitive_cache
from coderl.threads import spin_briefly as _spin_briefly

__version__ = "0.1.0"

if "torch" not in _sys.modules:  # libgomp reads its settings when torch loads it
    _spin_briefly()
_bound_primitive_cache()  # oneDNN reads it when it builds its first primitive; children inherit it
