"""Core records shared by every stage (DESIGN.md, "Core records")."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

FinishReason = Literal["stop", "length", "abort"]


@dataclass
class Completion:
    """What an engine returns for one request.

    ``token_ids`` are exactly the ids the engine sampled (the stop token included when one ended the
    request); ``logprobs[i]`` is the log-probability of ``token_ids[i]`` under the sampling
    distribution documented in :mod:`coderl.engine.sampler`.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    policy_version: int
    prompt_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens whose KV came from the prefix cache (prefill skipped)."""
    ttft_s: float = 0.0
    """Seconds from submission to the first sampled token."""
    latency_s: float = 0.0
    """Seconds from submission to completion."""
    stop_token_id: int | None = None
    """The stop token that ended the request, if one did."""
    stop_str: str | None = None
    """The stop string (``SamplingParams.stop``) that ended the request, if one did."""
    replica: str = ""
    """Which engine replica served it (set by the router and HTTP clients)."""
    departed: bool = False
    """The text left ``SamplingParams.expect_name`` at its last token, which ended the request."""
    token_versions: list[int] = field(default_factory=list)
    """Per sampled token, the policy version that sampled it, where it differs within the request (an
    update interrupted it, ``engine.update_mode=interrupt``); empty = ``policy_version`` for every token."""
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class Task:
    """One repository task: what the agent is told, where it starts, and how it is graded.

    The starting snapshot is ``repo`` (a folder or an archive). Hidden tests are never in it: they
    are written into the sandbox only at grading time, as files (``hidden_tests``) or as a diff
    (``test_patch``, SWE-bench's form).
    """

    id: str
    instruction: str
    repo: Path
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    hidden_tests: dict[str, str] = field(default_factory=dict)
    """Repository-relative path -> content of each hidden test file."""
    test_patch: str | None = None
    """Hidden tests as a unified diff applied at grading time (SWE-bench)."""
    gold_patch: str | None = None
    tier: str = ""
    source: str = ""
    """bundled | swebench | harbor | native"""
    workdir: str = "/workspace"
    """Where the repository sits inside the sandbox."""
    test_command: str | None = None
    """Shell command that runs the hidden tests; {junit} is replaced by the JUnit XML path. Default: pytest."""
    verifier: Literal["junit", "harbor"] = "junit"
    """junit: per-test results from a JUnit report; harbor: tests/test.sh writes /logs/verifier/reward.txt|json."""
    timeout_s: float = 120.0
    """Wall-clock limit of the grading run."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables of every sandbox of this task, the agent's and the grader's (e.g.
    ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` for tests that need no third-party pytest plugins)."""
    metadata: dict[str, object] = field(default_factory=dict)


ExitStatus = Literal[
    "submitted", "step_limit", "context_limit", "token_limit", "format_limit", "error", "finished"
]


@dataclass
class Trajectory:
    """One multi-turn rollout in token space.

    ``response_ids`` interleaves what the model sampled (``response_mask`` 1, ``logprobs`` from the
    engine) with what the environment inserted (tool output, user turns, turn closers: mask 0,
    logprob 0). At every turn the ids sent to the engine were exactly ``prompt_ids`` + the
    ``response_ids`` so far.
    """

    task_id: str
    group_id: str
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    num_turns: int = 0
    exit_status: str = ""
    patch: str = ""
    error: str | None = None
    policy_version: int = 0
    """The oldest policy version that sampled any of its tokens."""
    token_versions: list[int] = field(default_factory=list)
    """Per response token, the policy version that sampled it (-1 for environment tokens); empty where
    the source did not record versions (``policy_version`` then stands for every token)."""
    metrics: dict[str, float] = field(default_factory=dict)
    parts: list[Trajectory] = field(default_factory=list)
    """Further token sequences of the same rollout that do not extend this one as a prefix (an external
    agent's sub-agent, a compacted or rewritten history, seen by the recording proxy). Each is trained
    as its own sequence with this rollout's reward; group baselines count the rollout once."""

    def sequences(self) -> list[Trajectory]:
        """This trajectory and its parts: every token sequence of the rollout."""
        return [self, *self.parts]

    def label(
        self, *, group_id: str | None = None, reward: float | None = None, version_offset: int = 0
    ) -> None:
        """Set what every sequence of this rollout shares: its group (``group_id``), its graded
        ``reward``, and a shift of the policy versions (engine counter -> the run's). The one way these
        are written once a loop has returned, so a part can never be left in a group of its own."""
        for seq in self.sequences():
            if group_id is not None:
                seq.group_id = group_id
            if reward is not None:
                seq.reward = reward
            if version_offset:
                seq.policy_version += version_offset
                seq.token_versions = [v + version_offset if v >= 0 else v for v in seq.token_versions]
