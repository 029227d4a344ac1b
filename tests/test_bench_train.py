"""`coderl bench train` and `coderl bench learn`: their arithmetic, and a quick real run of the former."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from coderl import allocator
from coderl.bench.learn import paired_rise
from coderl.bench.train import to_markdown, variable_batch
from coderl.cli.main import main
from coderl.config.packaged import default_train_config
from coderl.memory import rss_mb
from coderl.train.config import ActorConfig


def test_variable_batch_spreads_lengths_evenly() -> None:
    seqs, starts = variable_batch(vocab=100, size=5, min_len=10, max_len=50, seed=0)
    assert sorted(len(s) for s in seqs) == [10, 20, 30, 40, 50]
    assert all(0 < st < len(s) for s, st in zip(seqs, starts, strict=True))
    assert all(0 <= t < 100 for s in seqs for t in s)


def test_paired_rise_by_hand_and_its_bootstrap_interval() -> None:
    # two seeds, three tasks: per-task rise averaged over seeds is a: (1-0 + 0.5-0)/2 = 0.75,
    # b: (0-0 + 0-0)/2 = 0, c: (0.5-0.5 + 1-0.5)/2 = 0.25; the mean rise is 1/3
    starts = [{"a": 0.0, "b": 0.0, "c": 0.5}, {"a": 0.0, "b": 0.0, "c": 0.5}]
    ends = [{"a": 1.0, "b": 0.0, "c": 0.5}, {"a": 0.5, "b": 0.0, "c": 1.0}]
    got = paired_rise(starts, ends)
    assert got["tasks"] == 3 and got["mean_rise"] == pytest.approx(1 / 3)
    lo, hi = got["rise_ci95"]
    assert 0.0 <= lo < 1 / 3 < hi <= 0.75  # within the smallest and largest task rise
    flat = paired_rise(starts, starts)
    assert flat["mean_rise"] == 0.0 and flat["rise_ci95"] == [0.0, 0.0]
    assert paired_rise([{"a": 0.0}], [{"b": 1.0}])["tasks"] == 0  # no task measured at both ends


@pytest.mark.slow
def test_bench_train_quick_measures_packing(capsys: pytest.CaptureFixture[str], tiny_model: Path) -> None:
    """On the tiny model (tests/tiny.py): the bench's arithmetic and plumbing are what is checked."""
    assert main(["bench", "train", "--quick", "--no-step", "--json", f"model.path={tiny_model}"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["packed_tokens_per_s"] > 0 and result["padded_tokens_per_s"] > 0
    assert result["packing_speedup"] == pytest.approx(
        result["packed_tokens_per_s"] / result["padded_tokens_per_s"]
    )
    assert result["peak_memory_mb"] > 100  # torch, the model and its optimizer state live here
    # peak RSS of the actor alone, each setting in a process of its own: the default and checkpointing flipped
    peaks = result["peak_rss_mb"]
    actor = yaml.safe_load(default_train_config().read_text())["actor"]
    tokens, checkpointing = actor.get("micro_batch_tokens", 4096), actor.get("gradient_checkpointing", False)
    mine = allocator.active()  # this process's: the rows run on it, and the last on the other one too
    plans = [(tokens, checkpointing, mine), (tokens, not checkpointing, mine)]
    if allocator.jemalloc_library():
        plans.append((tokens, checkpointing, "system" if mine == "jemalloc" else "jemalloc"))
    assert [(p["micro_batch_tokens"], p["gradient_checkpointing"], p["allocator"]) for p in peaks] == plans
    assert all(p["peak_mb"] >= p["loaded_mb"] > 100 and p["step_s"] > 0 for p in peaks)
    assert {p["actor"] for p in peaks} == {"RL"}  # --quick: the warm start's actor is left out
    assert result["lora_rank"] == actor["lora_rank"] == 16  # the packaged recipe trains LoRA adapters in RL
    assert "LoRA adapters of rank 16" in to_markdown(result) and "full fine-tuning" not in to_markdown(result)
    assert result["batch"]["padded_tokens"] > result["batch"]["real_tokens"]
    sharing = result["prefix_sharing"]
    assert sharing["shared_step_s"] > 0 and result["prefix_sharing_speedup"] == pytest.approx(
        sharing["unshared_step_s"] / sharing["shared_step_s"]
    )


def test_a_peak_measured_in_a_child_is_the_childs_own(tiny_model: Path) -> None:
    """Linux carries ru_maxrss over fork and exec: a child of a big bench process must not report the
    parent's peak as its own (it did: every RL row read the bench's 2503 MB)."""
    ballast = bytearray(b"x") * (2 << 30)  # 2 GiB, every page written: resident in this process
    parent = rss_mb()
    assert parent > 2048
    actor = ActorConfig(micro_batch_tokens=1024).model_dump_json()
    done = subprocess.run(
        [sys.executable, "-m", "coderl.bench.train_peak", actor, str(tiny_model), "0"],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    del ballast
    child = json.loads(done.stdout.strip().splitlines()[-1])
    assert 100 < child["loaded_mb"] <= child["peak_mb"] < parent - 1024, (child, parent)


LEARN_TINY = ["train.tasks=bundled:warmup", "train.steps=1", "rollout.agent=single_turn"]


def test_a_finished_run_is_reused_when_only_defaults_changed_and_not_when_a_setting_did(
    tmp_path: Path,
) -> None:
    from coderl.bench.learn import _finished, bench_root
    from coderl.config import load_config
    from coderl.config.loader import dump_config

    cfg = load_config(None, LEARN_TINY)
    run = tmp_path / "seed0"
    run.mkdir()
    (run / "bench.json").write_text('{"minutes": 1.0}')
    stored = yaml.safe_load(dump_config(cfg))
    del stored["train"]["max_staleness"]  # written by a coderl from before this setting existed
    stored["run"]["dir"] = "somewhere/else"  # a run that was moved
    (run / "config.yaml").write_text(yaml.safe_dump(stored))
    assert _finished(run, cfg)
    changed = load_config(None, [*LEARN_TINY, "actor.lr=0.5"])
    assert not _finished(run, changed)
    assert bench_root(changed) != bench_root(cfg)
    assert bench_root(load_config(None, [*LEARN_TINY, "run.seed=3"])) == bench_root(cfg)  # seeds share a root
    (run / "config.yaml").write_text("train: {no_such_setting: 1}\n")
    assert not _finished(run, cfg)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_bench_stopped_with_sigterm_stops_its_runs_and_does_not_wait_for_them(tmp_path: Path) -> None:
    """SIGTERM to a bench whose threads wait for its runs: the runs are told to stop (SIGTERM) and the
    bench exits in seconds. Before, the thread pool waited for every run to end by itself (a 60 s
    child kept the bench 60 s; an hour-long learning run, an hour)."""
    pids = tmp_path / "pids"
    (tmp_path / "run.py").write_text(f"import os, time\nopen({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\ntime.sleep(60)\n")
    script = (
        "import sys\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from coderl.bench.children import run_child, wait_stopping_children\n"
        "from coderl.signals import stop_on_sigterm\n"
        f"child = [sys.executable, {str(tmp_path / 'run.py')!r}]\n"
        "with stop_on_sigterm(), ThreadPoolExecutor(2) as pool:\n"
        "    wait_stopping_children(lambda: list(pool.map(lambda _: run_child(child), range(2))))\n"
    )
    bench = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (pids.is_file() and len(pids.read_text().split()) == 2):
        assert bench.poll() is None and time.monotonic() < deadline, bench.stderr.read() if bench.stderr else ""
        time.sleep(0.05)
    sent = time.monotonic()
    bench.send_signal(signal.SIGTERM)
    bench.wait(timeout=60)
    assert time.monotonic() - sent < 10
    for pid in pids.read_text().split():
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_learning_run_ends_when_its_bench_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys; from coderl.bench.children import _die_with_parent\n"
         "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], preexec_fn=_die_with_parent)\n"
         "print(child.pid, flush=True); child.wait()"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)  # no handler, no finally: only the kernel can end the child
    parent.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and "Z" not in Path(f"/proc/{child}/stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "the run outlived its bench"
        time.sleep(0.05)
