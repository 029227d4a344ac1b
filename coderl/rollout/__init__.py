"""Rollouts: tasks x samples through an agent loop, graded by hidden tests, stored as they finish.

``run_rollouts`` is the one place that rolls out, grades and sets rewards; ``coderl eval``,
``coderl rollout`` and the trainer all call it (see :mod:`coderl.rollout.runner`).
"""
