"""coderl.proxy.merge: calls -> trajectories, with hand-computed ids, masks and logprobs."""

from __future__ import annotations

import pytest

from coderl.proxy.merge import CallTokens, merge_calls
from coderl.tokens import common_prefix


def call(
    cid: int, prompt: list[int], completion: list[int], version: int = 0, head: str | None = None
) -> CallTokens:
    return CallTokens(cid, prompt, completion, [-float(t) / 100 for t in completion], version, head)


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2], [1, 2, 3]) == 2


def test_consecutive_calls_merge_with_inserted_tokens_masked() -> None:
    calls = [
        call(1, [1, 2, 3], [10, 11], version=3),
        call(2, [1, 2, 3, 10, 11, 20, 21], [12], version=4),
        call(3, [1, 2, 3, 10, 11, 20, 21, 12, 30], [13, 14], version=4),
    ]
    merged = merge_calls(calls, session_id="s1", task_id="t")
    assert len(merged.trajectories) == 1
    traj = merged.trajectories[0]
    assert traj.prompt_ids == [1, 2, 3]
    assert traj.response_ids == [10, 11, 20, 21, 12, 30, 13, 14]
    assert traj.response_mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert traj.logprobs == [-0.10, -0.11, 0.0, 0.0, -0.12, 0.0, -0.13, -0.14]
    assert traj.num_turns == 3
    assert traj.policy_version == 3  # the oldest version that sampled any token
    assert (traj.group_id, traj.task_id) == ("s1", "t")
    assert merged.call_ids == [[1, 2, 3]]
    assert merged.stats() == {"calls": 3, "trajectories": 1, "splits": 0, "split_reasons": {}}


@pytest.mark.parametrize(
    ("second_prompt", "reason"),
    [
        ([1, 2, 3, 10, 99, 20], "reply_rewritten"),  # previous prompt intact, the reply edited
        ([1, 2, 7, 8], "new_context"),  # leaves the first prompt: another system prompt or task
        ([1, 2, 3, 10, 11, 20, 21, 12, 30, 13, 14], None),  # extends: no split
    ],
)
def test_split_reasons_against_a_one_call_trajectory(second_prompt: list[int], reason: str | None) -> None:
    merged = merge_calls([call(1, [1, 2, 3], [10, 11]), call(2, second_prompt, [5])])
    if reason is None:
        assert len(merged.trajectories) == 1
    else:
        assert merged.splits == [{"call_id": 2, "reason": reason}]
        assert len(merged.trajectories) == 2
        assert merged.trajectories[1].prompt_ids == second_prompt
        assert merged.trajectories[1].response_mask == [1]


def test_a_dropped_reply_is_named_as_such() -> None:
    opening = [90, 91]  # the template's opening of an assistant turn
    first = call(1, [1, 2, 3, *opening], [10, 11])  # a malformed reply, say
    dropped = call(2, [1, 2, 3, 40, 41, *opening], [12])  # the agent left it out and told the model why
    assert merge_calls([first, dropped], generation_prompt=opening).splits == [
        {"call_id": 2, "reason": "reply_dropped"}
    ]
    assert merge_calls([first, dropped]).splits == [
        {"call_id": 2, "reason": "new_context"}
    ]  # opening unknown
    other = call(2, [1, 7, 40, *opening], [12])  # leaves the conversation before the opening
    assert merge_calls([first, other], generation_prompt=opening).splits[0]["reason"] == "new_context"


def test_compaction_and_history_rewrite() -> None:
    first = [call(1, [1, 2], [3]), call(2, [1, 2, 3, 4, 5, 6], [7])]  # context [1..7]
    compacted = merge_calls([*first, call(3, [1, 2, 3, 9], [8])])
    assert compacted.splits == [{"call_id": 3, "reason": "compaction"}]
    rewritten = merge_calls([*first, call(3, [1, 2, 3, 4, 9, 9, 9, 9], [8])])
    assert rewritten.splits == [{"call_id": 3, "reason": "history_rewritten"}]
    assert rewritten.stats()["split_reasons"] == {"history_rewritten": 1}


def test_sub_agent_in_between_does_not_break_the_main_trajectory() -> None:
    calls = [
        call(1, [1, 2], [3]),  # main agent
        call(2, [50, 51], [52]),  # sub-agent, its own conversation
        call(3, [50, 51, 52, 53], [54]),  # sub-agent continues
        call(4, [1, 2, 3, 60], [61]),  # main agent resumes with the sub-agent's result
    ]
    merged = merge_calls(calls)
    assert merged.call_ids == [[1, 4], [2, 3]]
    assert merged.trajectories[0].response_ids == [3, 60, 61]
    assert merged.trajectories[0].response_mask == [1, 0, 1]
    assert merged.splits == [{"call_id": 2, "reason": "sub_agent"}]  # the main agent went on after it


def test_a_new_conversation_that_nothing_follows_is_a_new_context() -> None:
    merged = merge_calls([call(1, [1, 2], [3]), call(2, [50, 51], [52]), call(3, [50, 51, 52, 53], [54])])
    assert merged.splits == [{"call_id": 2, "reason": "new_context"}]


def test_the_same_request_again_is_a_retry() -> None:
    first = call(1, [1, 2, 3], [10, 11])
    assert merge_calls([first, call(2, [1, 2, 3], [12])]).splits == [{"call_id": 2, "reason": "retry"}]


def test_a_rewritten_message_under_the_same_system_prompt_is_a_rewritten_history() -> None:
    # aider: turn 1's user message ends with a reminder (7, 7); turn 2 sends it without, then its reply
    system, user1, reminder = [1, 2, 3], [20, 21], [7, 7]
    turn1 = call(1, system + user1 + reminder, [10, 11], head="system: fix bugs")
    turn2 = call(2, system + user1 + [10, 11, 30] + reminder, [12], head="system: fix bugs")
    merged = merge_calls([turn1, turn2])
    assert merged.splits == [{"call_id": 2, "reason": "history_rewritten"}]
    # the same tokens with another first message are another conversation
    other = call(2, turn2.prompt_ids, [12], head="system: summarise")
    assert merge_calls([turn1, other]).splits == [{"call_id": 2, "reason": "new_context"}]
    assert merge_calls([call(1, turn1.prompt_ids, [10, 11]), call(2, turn2.prompt_ids, [12])]).splits == [
        {"call_id": 2, "reason": "new_context"}
    ]  # no messages known (completions calls): the tokens alone cannot tell


def test_a_compaction_after_its_summary_request_is_judged_against_its_own_conversation() -> None:
    """The Codex CLI compacts: a summary request (no tools: another first message), then the main
    conversation again, shorter. The summary is a new context; what follows is a compaction of the
    main one, not a second new context judged against the summary."""
    main = "system: code (tools: shell)"
    calls = [
        call(1, [1, 2, 3], [4], head=main),
        call(2, [1, 2, 3, 4, 5, 6], [7], head=main),
        call(3, [90, 2, 3, 4, 5, 6, 7, 8], [9], head="system: code (tools: none)"),  # summarise
        call(4, [1, 2, 9, 10], [11], head=main),  # the main conversation, its history summarised
    ]
    assert merge_calls(calls).splits == [{"call_id": 3, "reason": "new_context"}, {"call_id": 4, "reason": "compaction"}]
    # ... while a second sub-agent of the same kind is a sub-agent again, not a compaction of the first
    m, sub = "system: main (tools: Task, Bash)", "system: sub-agent (tools: Bash)"
    calls = [
        call(1, [1, 2, 3], [4], head=m),
        call(2, [50, 51, 60, 61, 62], [63], head=sub),
        call(3, [50, 51, 60, 61, 62, 63, 64], [65], head=sub),
        call(4, [1, 2, 3, 4, 5], [6], head=m),
        call(5, [50, 51, 70], [71], head=sub),  # another task for the same kind of sub-agent
        call(6, [1, 2, 3, 4, 5, 6, 7], [8], head=m),
    ]
    assert merge_calls(calls).splits == [{"call_id": 2, "reason": "sub_agent"}, {"call_id": 5, "reason": "sub_agent"}]


def test_longest_extendable_trajectory_wins() -> None:
    calls = [call(1, [1], [2]), call(2, [1, 9], [3]), call(3, [1, 9, 3, 4], [5])]
    merged = merge_calls(calls)
    assert merged.call_ids == [[1], [2, 3]]


def test_mismatched_logprobs_are_rejected() -> None:
    with pytest.raises(ValueError, match="logprobs"):
        merge_calls([CallTokens(1, [1], [2, 3], [-0.1], 0)])
