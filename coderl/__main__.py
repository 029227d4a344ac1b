"""``python -m coderl`` is the same as the ``coderl`` command."""

from coderl.cli.main import entry

entry()
