"""Partial credit for near misses (train.patch_credit): the overlap score, its schedule, and where it
counts (the batch's rewards, dynamic sampling, the step's figures) and where it must not (the recorded
task reward, pass rates, held-out tasks)."""

from __future__ import annotations

import pytest

from coderl.config import load_config
from coderl.errors import ConfigError
from coderl.rl import AlgoConfig
from coderl.tasks.patching import change_overlap, rewrites_only_gold_lines
from coderl.train.batch import build_batch
from coderl.train.credit import PatchCredit
from coderl.train.metrics import summary_line
from coderl.train.rollouts import informative_groups
from coderl.train.signal import SignalWatch, signal_metrics
from tests.test_signal import result

GOLD = "--- a/m.py\n+++ b/m.py\n@@ -2,2 +2,2 @@\n def f(x):\n-    return x - 1\n+    return x + 1\n"
OTHER_WAY = GOLD.replace("x + 1", "x + 2")  # the right line, changed another way
WITH_EDITS = (  # the fix, and two more lines broken while the function was written out again
    "--- a/m.py\n+++ b/m.py\n@@ -2,4 +2,4 @@\n def f(x):\n-    return x - 1\n+    return x + 1\n"
    "-y = 2\n+y = 3\n-z = 4\n+z = 5\n"
)
ELSEWHERE = "--- a/m.py\n+++ b/m.py\n@@ -9,1 +9,1 @@\n-w = 1\n+w = 0\n"


def test_change_overlap_scores_how_close_a_patch_comes_to_the_gold_change() -> None:
    assert change_overlap(GOLD, GOLD) == 1.0
    assert change_overlap(OTHER_WAY, GOLD) == pytest.approx(0.5)  # removed the buggy line, wrote it wrong
    assert change_overlap(WITH_EDITS, GOLD) == pytest.approx(2 * (2 / 6) * 1 / (2 / 6 + 1))  # 0.5
    assert change_overlap(ELSEWHERE, GOLD) == 0.0
    assert change_overlap("", GOLD) == 0.0 and change_overlap(GOLD, "") == 0.0
    assert change_overlap(GOLD.replace("m.py", "n.py"), GOLD) == 0.0  # the same lines in another file
    assert change_overlap(GOLD.replace("x + 1", "x + 1   "), GOLD) == 1.0  # trailing blanks do not count
    more = WITH_EDITS + "-q = 1\n+q = 2\n"
    assert change_overlap(more, GOLD) < change_overlap(WITH_EDITS, GOLD)  # more breaking edits, less credit


def test_the_credit_falls_to_zero_and_never_reaches_a_solved_sample() -> None:
    credit = PatchCredit(0.4, steps=4, golds={"t": GOLD})
    assert [credit.coef(s) for s in (1, 2, 3, 4, 5, 9)] == pytest.approx([0.4, 0.3, 0.2, 0.1, 0.0, 0.0])
    samples = [
        result("t#0", 1.0, patch=GOLD), result("t#0", 0.0, patch=OTHER_WAY), result("t#0", 0.0),
        result("u#0", 0.0, patch=OTHER_WAY),  # a task without a gold patch here (a held-out one): none
    ]  # fmt: skip
    credit.apply(samples, step=1)
    assert [r.trajectory.metrics["patch_credit"] for r in samples] == pytest.approx([0.0, 0.2, 0.0, 0.0])
    assert [r.trajectory.reward for r in samples] == [1.0, 0.0, 0.0, 0.0]  # the hidden tests' verdict stays
    credit.apply(samples, step=5)
    assert [r.trajectory.metrics["patch_credit"] for r in samples] == [0.0] * 4
    with pytest.raises(ValueError, match=r"patch credit 1\.0: give a number in"):
        PatchCredit(1.0, 4, {})


def test_the_precise_credit_pays_only_near_misses_that_stay_on_the_bugs_lines() -> None:
    broad = (  # the bug's line changed another way, and a line the gold patch leaves rewritten beside it
        "--- a/m.py\n+++ b/m.py\n@@ -2,3 +2,3 @@\n def f(x):\n-    return x - 1\n+    return x + 2\n-y = 2\n+y = 3\n"
    )
    assert rewrites_only_gold_lines(OTHER_WAY, GOLD) and rewrites_only_gold_lines(GOLD, GOLD)
    assert not rewrites_only_gold_lines(broad, GOLD) and not rewrites_only_gold_lines(WITH_EDITS, GOLD)
    assert not rewrites_only_gold_lines(GOLD.replace("m.py", "n.py"), GOLD)  # the same line, another file
    samples = [result("t#0", 0.0, patch=p) for p in (OTHER_WAY, broad, WITH_EDITS, ELSEWHERE, "")]
    PatchCredit(0.4, 4, {"t": GOLD}).apply(samples, step=1)
    plain = [r.trajectory.metrics["patch_credit"] for r in samples]
    assert plain[1] > 0 and plain[2] > 0  # the F1 alone pays the broad rewrite that touched the bug's line
    PatchCredit(0.4, 4, {"t": GOLD}, precise=True).apply(samples, step=1)
    precise = [r.trajectory.metrics["patch_credit"] for r in samples]
    assert precise == pytest.approx([plain[0], 0.0, 0.0, 0.0, 0.0]) and plain[0] == pytest.approx(0.2)


def test_a_group_that_all_failed_teaches_by_its_credit() -> None:
    failed = [result("t#0", 0.0, patch=OTHER_WAY), result("t#0", 0.0), result("u#1", 0.0), result("u#1", 0.0)]
    assert informative_groups(failed) == set()  # without credit: every reward 0, nothing to learn
    PatchCredit(0.5, 8, {"t": GOLD, "u": GOLD}).apply(failed, step=1)
    assert informative_groups(failed) == {"t#0"}  # a near miss beside a sample that changed nothing
    for r in failed[:2]:  # two model tokens each
        r.trajectory.response_ids, r.trajectory.response_mask, r.trajectory.logprobs = [5, 6], [1, 1], [-0.5, -0.5]
    batch = build_batch([r.trajectory for r in failed[:2]], AlgoConfig(advantage="grpo"), max_response=8)
    assert batch.rewards.tolist() == pytest.approx([0.25, 0.0])
    assert batch.advantages[0].max() > 0 > batch.advantages[1].min()  # the near miss is pushed up
    m = signal_metrics(failed)
    assert m["teaching_groups"] == 0.0  # by the hidden tests' verdict, still no group teaches ...
    assert m["credit_groups"] == 0.5 and m["patch_credit_mean"] == pytest.approx(0.25 / 4)  # ... but one by credit
    row = {"pass_rate": 0.0, "reward_mean": 0.0, "response_len_mean": 10.0, "groups": 2, **m}
    assert "credit 0.06 (groups by credit 50%)" in summary_line(row)
    assert "patch_credit_mean" not in signal_metrics([result("t#0", 0.0)])  # off: no credit figures


def test_patch_credit_config_is_checked() -> None:
    cfg = load_config(overrides=["train.patch_credit=0.3", "train.patch_credit_steps=4"])
    assert cfg.train.patch_credit == 0.3 and cfg.train.patch_credit_steps == 4
    with pytest.raises(ConfigError, match="patch_credit"):
        load_config(overrides=["train.patch_credit=1.0"])
    with pytest.raises(ConfigError, match=r"train\.patch_credit_steps: empty with train\.patch_credit=0\.3"):
        load_config(overrides=["train.patch_credit=0.3", "train.rl_minutes=5"])
    assert load_config(overrides=["train.patch_credit=0.3", "train.patch_credit_precise=true"]).train.patch_credit_precise
    with pytest.raises(ConfigError, match=r"train\.patch_credit_precise=true .* train\.patch_credit=0 gives none"):
        load_config(overrides=["train.patch_credit_precise=true"])


def test_the_starved_signal_warning_says_when_only_the_credit_taught() -> None:
    failed = [result("t#0", 0.0, patch=OTHER_WAY), result("t#0", 0.0)]
    PatchCredit(0.5, 8, {"t": GOLD}).apply(failed, step=1)
    warning = SignalWatch(patience=1, group_size=2).observe(1, failed)
    assert warning is not None and "every sample failed" in warning
    assert "Only partial credit (train.patch_credit) taught, in 1 group(s)" in warning
    plain = SignalWatch(patience=1, group_size=2).observe(1, [result("t#0", 0.0), result("t#0", 0.0)])
    assert plain is not None and "partial credit" not in plain
