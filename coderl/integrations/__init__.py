"""Bridges to other training frameworks. Each bridge's framework is optional: coderl never depends on
it, and only the module that subclasses the framework's own classes needs it installed.

- :mod:`coderl.integrations.verl_bridge` (no verl needed): a coderl :class:`~coderl.engine.base.Engine`
  over verl's rollout-server client, one coderl rollout run and graded through it, the result in verl's
  ``AgentLoopOutput`` fields, and tasks as verl's RL dataset.
- :mod:`coderl.integrations.verl` (needs verl): the agent-loop class verl instantiates.
"""
