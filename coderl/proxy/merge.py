"""Recorded calls -> trajectories, in token space (pure functions, no I/O).

A call extends a trajectory when its prompt starts with that trajectory's whole context
(``prompt_ids + response_ids``) as a token prefix: the ids between the old context and the new prompt
(turn closers, tool results, user turns) are appended with mask 0 and logprob 0, then the call's
completion with mask 1 and the engine's logprobs. A call that extends no trajectory starts a new one,
and the split is counted with a reason, judged against the trajectory extended last (or, when that was a
one-call side request with another first message, against the trajectory extended just before it that
has the call's own: the Codex CLI's compacted conversation follows its tool-less summary request and is
the main conversation's compaction):

- ``retry``: the same prompt as that trajectory's latest call (the agent sent the request again, e.g.
  after a reply it could not use);
- ``reply_rewritten``: the previous prompt is intact but the model's reply is not (the agent edited it);
- ``reply_dropped``: the previous prompt is intact up to its generation prompt (the opening of the
  assistant's turn) and goes on with other messages: the agent dropped the reply (a malformed one,
  typically) and carried on without it;
- ``history_rewritten``: the prompt keeps the conversation's first message (its system prompt) but
  leaves the history: the agent rewrote a message it had sent (aider adds a format reminder to its
  newest user message and removes it on the next turn), or any other edit that is not a compaction;
- ``compaction``: the prompt leaves the history and is shorter than it (summarised / truncated);
- ``new_context``: the prompt leaves the trajectory's first prompt and has another first message (or
  no messages are known, as for completions calls): another conversation;
- ``sub_agent``: a ``new_context`` after which an earlier trajectory goes on (the main agent resumed
  once its sub-agent was done).

When several trajectories could be extended (a sub-agent ran in between), the longest context wins, so
the main agent resumes its own trajectory. Nothing is ever spliced that is not an exact token prefix.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from coderl.tokens import common_prefix
from coderl.types import Trajectory


@dataclass(frozen=True)
class CallTokens:
    """The token-space part of one recorded call."""

    call_id: int
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    policy_version: int = 0
    head: str | None = None
    """The request's first message in canonical form (its system prompt, typically), with its tools;
    None when the call had no messages (completions)."""


@dataclass
class MergeResult:
    """Trajectories built from a session's calls, with which calls went where and why splits happened."""

    trajectories: list[Trajectory]
    call_ids: list[list[int]]
    """The calls of each trajectory, in order."""
    splits: list[dict[str, Any]] = field(default_factory=list)
    """One entry per call that started a trajectory after the first: {"call_id", "reason"}."""

    def stats(self) -> dict[str, Any]:
        """calls, trajectories, splits (count) and split reasons (counts), resumed trajectories."""
        calls = sum(len(c) for c in self.call_ids)
        return {
            "calls": calls,
            "trajectories": len(self.trajectories),
            "splits": len(self.splits),
            "split_reasons": dict(Counter(s["reason"] for s in self.splits)),
        }


def _context(traj: Trajectory) -> list[int]:
    return traj.prompt_ids + traj.response_ids


def split_reason(
    prompt: list[int],
    traj: Trajectory,
    last_prompt: list[int],
    generation_prompt: list[int] | None = None,
    same_head: bool = False,
) -> str:
    """Why ``prompt`` does not extend ``traj`` (whose latest call had prompt ``last_prompt``);
    ``generation_prompt``: the chat template's opening of an assistant turn, if known; ``same_head``:
    the call's first message is the trajectory's (known only for calls made with messages)."""
    if prompt == last_prompt:
        return "retry"
    context = _context(traj)
    shared = common_prefix(prompt, context)
    if shared >= len(last_prompt):
        return "reply_rewritten"
    opening = len(generation_prompt or [])
    if opening and last_prompt[-opening:] == generation_prompt:
        conversation = len(last_prompt) - opening
        if len(prompt) > conversation and prompt[:conversation] == last_prompt[:conversation]:
            return "reply_dropped"
    if shared < len(traj.prompt_ids) and not same_head:
        return "new_context"
    if len(prompt) < len(context):
        return "compaction"
    return "history_rewritten"


def merge_calls(
    calls: list[CallTokens],
    session_id: str = "",
    task_id: str = "",
    generation_prompt: list[int] | None = None,
) -> MergeResult:
    """Merge calls (in the order they were recorded) into trajectories; see the module docstring.
    ``generation_prompt`` (the chat's, :meth:`ChatFormat.generation_prompt`) tells a dropped reply."""
    trajs: list[Trajectory] = []
    members: list[list[int]] = []
    last_prompts: list[list[int]] = []
    splits: list[dict[str, Any]] = []
    heads: list[str | None] = []  # each trajectory's first message
    extended: list[int] = []  # each trajectory's latest call, by position in ``calls``
    started: list[int] = []  # the position of the call that started each trajectory
    latest = -1  # index of the trajectory extended last
    for position, call in enumerate(calls):
        if len(call.logprobs) != len(call.completion_ids):
            raise ValueError(
                f"call {call.call_id}: {len(call.logprobs)} logprobs for {len(call.completion_ids)} completion ids"
            )
        best = -1
        for i, traj in enumerate(trajs):
            n = len(traj.prompt_ids) + len(traj.response_ids)
            if len(call.prompt_ids) >= n and call.prompt_ids[: len(traj.prompt_ids)] == traj.prompt_ids:
                if call.prompt_ids[len(traj.prompt_ids) : n] == traj.response_ids:
                    if best < 0 or n >= len(_context(trajs[best])):
                        best = i
        if best >= 0:
            traj = trajs[best]
            inserted = call.prompt_ids[len(traj.prompt_ids) + len(traj.response_ids) :]
            traj.response_ids += inserted + call.completion_ids
            traj.response_mask += [0] * len(inserted) + [1] * len(call.completion_ids)
            traj.logprobs += [0.0] * len(inserted) + list(call.logprobs)
            traj.token_versions += [-1] * len(inserted) + [call.policy_version] * len(call.completion_ids)
            traj.num_turns += 1
            traj.policy_version = min(traj.policy_version, call.policy_version)
            members[best].append(call.call_id)
            last_prompts[best] = call.prompt_ids
            extended[best] = position
            latest = best
            continue
        if latest >= 0:
            judge = latest  # the conversation this call leaves: its own, when one side request came between
            if call.head is not None and call.head != heads[latest] and len(members[latest]) == 1:
                before = started[latest] - 1  # the call just before that side request
                own = [i for i, head in enumerate(heads) if head == call.head and extended[i] == before]
                judge = own[0] if own else latest
            same_head = call.head is not None and call.head == heads[judge]
            reason = split_reason(call.prompt_ids, trajs[judge], last_prompts[judge], generation_prompt, same_head)
            splits.append({"call_id": call.call_id, "reason": reason, "trajectory": len(trajs)})
        trajs.append(
            Trajectory(
                task_id=task_id,
                group_id=session_id,
                prompt_ids=list(call.prompt_ids),
                response_ids=list(call.completion_ids),
                response_mask=[1] * len(call.completion_ids),
                logprobs=list(call.logprobs),
                token_versions=[call.policy_version] * len(call.completion_ids),
                num_turns=1,
                policy_version=call.policy_version,
            )
        )
        members.append([call.call_id])
        last_prompts.append(call.prompt_ids)
        heads.append(call.head)
        extended.append(position)
        started.append(position)
        latest = len(trajs) - 1
    for split in splits:  # a new conversation after which an older one went on was a sub-agent's
        t = split.pop("trajectory")
        if split["reason"] == "new_context" and any(extended[i] > started[t] for i in range(t)):
            split["reason"] = "sub_agent"
    for traj, ids in zip(trajs, members, strict=True):
        traj.metrics["calls"] = float(len(ids))
        traj.metrics["sampled_tokens"] = float(sum(traj.response_mask))
    return MergeResult(trajs, members, splits)
