"""coderl bench agents: its pieces (the figures themselves come from running it)."""

from __future__ import annotations

import pytest

from coderl.bench.agents import AGENTS, bench_agents, pinned_version, shared_share, to_markdown
from coderl.config import Config, load_config
from coderl.config.packaged import packaged_config
from coderl.errors import ConfigError
from coderl.types import Trajectory


def test_every_agent_has_a_recipe_with_its_pin() -> None:
    versions = {a: pinned_version(load_config(str(packaged_config(f"remote_{a}.yaml"))), a) for a in AGENTS}
    assert versions["codex"] == "0.171.0" and versions["claude_code"] == "2.1.332"
    assert versions["aider"] == "0.86.2" and versions["opencode"] == "1.18.33"
    assert versions["mini_swe_agent"][0].isdigit()  # no pin: the installed version


def test_the_shared_prefix_share_of_a_rollout() -> None:
    history = list(range(100, 160))
    main = Trajectory("t", "g", prompt_ids=history + [1, 2], response_ids=[7, 8, 9], response_mask=[1, 1, 1])
    part = Trajectory("t", "g", prompt_ids=history + [3], response_ids=[5, 6], response_mask=[1, 1])
    main.parts = [part]
    shared, plain = shared_share(main)
    assert plain == (62 + 3 - 1) + (61 + 2 - 1) and plain - shared == 60  # the history, once


async def test_an_agent_without_a_recipe_is_named() -> None:
    with pytest.raises(ConfigError, match=r"\['cursor'\] have no packaged recipe; choose from mini_swe_agent"):
        await bench_agents(Config(), ["cursor"], 1, console=None)  # type: ignore[arg-type]


def test_the_table_reports_each_agent() -> None:
    row = {
        "agent": "aider", "version": "0.86.2", "endpoints": {"chat": 6}, "calls_per_rollout": 1.5,
        "sequences_per_rollout": 1.5, "split_reasons": {"history_rewritten": 2}, "token_exact": "4/4",
        "shared_prefix_share": 0.31, "exit_statuses": {"submitted": 4}, "seconds_per_rollout": 12.0,
    }  # fmt: skip
    text = to_markdown({"machine": {"cpu": "x", "cores": 2}, "tasks_per_agent": 4, "agents": [row]})
    assert "| aider | 0.86.2 | chat 6 | 1.5 | 1.5 | history_rewritten 2 | 31% | 4/4 | submitted 4 | 12 |" in text
