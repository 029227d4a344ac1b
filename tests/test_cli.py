"""The coderl command: help texts, unbuilt commands, config errors, and `engine serve` as a real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from coderl.cli.main import main
from tests.servers import free_port, wait_healthy


def test_help_lists_every_design_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("train", "eval", "tasks", "engine", "proxy", "sandbox", "view", "bench"):
        assert cmd in out


def test_every_bench_is_built(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    for what in ("engine", "sandbox", "rollout", "train", "learn", "proxy"):
        assert what in out
    assert "not built yet" not in out


def test_bad_override_fails_before_work(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["demo", f"run.dir={tmp_path / 'r'}", "engine.max_batch_size=many"]) == 2
    err = capsys.readouterr().err
    assert "engine.max_batch_size" in err and "'many'" in err
    assert not (tmp_path / "r").exists()  # nothing was started or written


def test_a_train_config_file_changes_only_its_keys_unless_bare(tmp_path: Path) -> None:
    from coderl.cli.train_cmd import train_config

    one = tmp_path / "one.yaml"
    one.write_text("train:\n  steps: 3\n")
    layered = train_config(str(one), ["actor.lr=0.001"])
    assert layered.train.steps == 3 and layered.actor.lr == 0.001
    # everything else is the packaged recipe's (coderl/configs/train.yaml)
    assert layered.model.tool_format == "xml" and layered.rollout.tools == ["show_function", "replace_function", "submit"]
    assert layered.sft.before_rl and layered.train.group_size == 8
    bare = train_config(str(one), [], bare=True)
    assert bare.train.steps == 3 and bare.model.tool_format == "auto" and bare.rollout.tools is None
    assert not bare.sft.before_rl


def test_the_gpu_recipe_is_the_main_jobs_with_a_larger_rl_budget() -> None:
    from coderl.cli.train_cmd import train_config
    from coderl.config.packaged import packaged_config

    cpu, gpu = train_config(None, []), train_config(str(packaged_config("train_gpu.yaml")), [])
    assert gpu.train.tasks == cpu.train.tasks and gpu.train.val_size == cpu.train.val_size
    # the same warm start, but for its activation checkpointing (memory is no concern on a GPU)
    same_sft = gpu.sft.model_copy(update={"gradient_checkpointing": cpu.sft.gradient_checkpointing})
    assert same_sft == cpu.sft and not gpu.sft.gradient_checkpointing and gpu.rollout.max_turns == cpu.rollout.max_turns
    assert gpu.rollout.temperature == cpu.rollout.temperature and gpu.algo == cpu.algo
    per_step = gpu.train.tasks_per_step * gpu.train.group_size
    assert per_step >= 4 * cpu.train.tasks_per_step * cpu.train.group_size and gpu.train.rl_minutes
    assert gpu.rollout.max_sandboxes >= per_step and gpu.engine.max_batch_size >= per_step
    assert (cpu.train.mode, gpu.train.mode) == ("async", "sync")  # the GPU's as measured there


@pytest.mark.slow
def test_demo_writes_a_run_directory(tmp_path: Path) -> None:
    assert main(["demo", f"run.dir={tmp_path / 'run'}", "--requests", "2", "--max-tokens", "8"]) == 0
    run = tmp_path / "run"
    assert (run / "config.yaml").is_file()
    lines = (run / "completions.jsonl").read_text().splitlines()
    assert len(lines) == 2 and len(json.loads(lines[0])["token_ids"]) >= 1
    assert json.loads((run / "summary.json").read_text())["output_tokens"] >= 2


@pytest.mark.slow
def test_engine_serve_process_answers_vllm_and_sglang_requests() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coderl.cli.main",
            "engine",
            "serve",
            f"server.port={port}",
            "engine.max_batch_size=4",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(f"{url}/health", proc)
        models = httpx.get(f"{url}/v1/models").json()
        assert models["data"][0]["id"] == "SmolLM2-135M-Instruct"
        r = httpx.post(
            f"{url}/v1/completions",
            json={"prompt": [1, 4093, 198], "max_tokens": 5, "logprobs": 0, "temperature": 0},
            timeout=60,
        ).json()
        assert len(r["choices"][0]["token_ids"]) == len(r["choices"][0]["logprobs"]["token_logprobs"]) >= 1
        g = httpx.post(
            f"{url}/generate",
            json={
                "input_ids": [1, 4093, 198],
                "sampling_params": {"max_new_tokens": 5, "temperature": 0},
                "return_logprob": True,
            },
            timeout=60,
        ).json()
        assert g["output_ids"] == r["choices"][0]["token_ids"]  # same greedy answer in both dialects
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def test_outputs_that_would_lose_files_are_refused_before_any_work(tmp_path: Path) -> None:
    """A config file given where the output goes, a folder of other files as a model's --out, a run
    directory as --out: each refused (exit 2) with the files untouched."""
    from coderl.cli.main import main

    config = tmp_path / "my.yaml"
    config.write_text("tasks:\n  source: bundled\n")
    assert main(["tasks", "convert", str(config)]) == 2  # CONFIG first, as other commands take it
    assert config.read_text() == "tasks:\n  source: bundled\n"
    assert main(["tasks", "convert", str(tmp_path)]) == 2
    kept = tmp_path / "mine"
    kept.mkdir()
    (kept / "notes.txt").write_text("keep me")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("run: {}\n")
    for out in (kept, run):
        assert main(["export", str(run), "--out", str(out)]) == 2
        assert main(["sft", "--out", str(out), f"run.dir={tmp_path / 'sft'}"]) == 2
    assert (kept / "notes.txt").read_text() == "keep me" and (run / "config.yaml").is_file()
    assert not (tmp_path / "sft").exists()  # refused before its run directory was made
    earlier = tmp_path / "model"
    earlier.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (earlier / name).write_text("{}")
    from coderl.train.export import check_model_out

    check_model_out(earlier)  # an earlier exported model is replaced, as a re-export expects
    check_model_out(tmp_path / "new")


@pytest.mark.parametrize(
    "argv, said",
    [
        (["bench", "rl", "--seeds", "a,b"], "argument --seeds: 'a,b' is not a comma-separated list of integers"),
        (["bench", "learn", "--seeds", ""], "argument --seeds: give at least one"),
        (["bench", "rl", "--temperatures", "hot"], "argument --temperatures: 'hot' is not a comma-separated list"),
        (["bench", "synth", "--n", "0"], "argument --n: '0': must be an integer of at least 1"),
        (["bench", "scale", "--latency", "-1"], "argument --latency: '-1': must be a number of at least 0"),
        (["bench", "shard", "--ranks", "1"], "argument --ranks: '1': must be an integer of at least 2"),
        (["tasks", "synth", "repo", "out", "--n", "-3"], "argument --n: '-3': must be an integer of at least 1"),
        (["tasks", "synth", "repo", "out", "--timeout", "0"], "argument --timeout: '0': must be a number of at least 1"),
        (["view", "runs", "--port", "99999"], "argument --port: '99999': a port is 0 (any free one) to 65535"),
        (["demo", "--requests", "0"], "argument --requests: '0': must be an integer of at least 1"),
        (["tasks", "list", "tasks.source=pypi:"], "'pypi:' is not a PyPI project"),
        (["eval", "sandbox.backend=remote"], "sandbox.backend=remote needs sandbox.remote_url and sandbox.remote_token"),
        (["train", "sft.data=[nope]"], "sft.data: got 'nope'; each source is gold:TASK_SOURCE"),
        (["bench", "sandbox", "--quick", "--write", "no-such-folder/B.md"], "--write no-such-folder/B.md: its folder"),
        (["eval", "rollout.agent=nope"], "unknown agent loop 'nope'; registered: single_turn, tool, swe, remote"),
        (["train", "--bar"], "unrecognized arguments: --bar"),  # not taken for --bare
        (["sandbox", "serve", "server.host=nope.invalid"], "server.host: got 'nope.invalid', which does not resolve"),
        (["sandbox", "serve", 'server.tokens=[""]'], "an empty token would let in requests that carry none"),
        (["eval", "engine.type=http", "engine.urls=[notaurl]"], "engine.urls: 'notaurl' is not an http:// or https://"),
        (["proxy", "serve", "proxy.public_url=notaurl"], "proxy.public_url: 'notaurl' is not an http:// or https://"),
        (["proxy", "serve", "proxy.db=/tmp"], "proxy.db '/tmp' is a folder"),
        (["tasks", "synth", "coderl", "coderl/out"], "is inside the repository"),
        (["tasks", "synth", "coderl", "out", "--name", "../evil"], "--name '../evil' must be a plain name"),
        (["tasks", "list", "tasks.source=dataset:README.md"], "is not a Parquet file"),
        (["proxy", "serve", "proxy.host=10.255.255.1"], "proxy.host: got '10.255.255.1', which is not an address of"),
    ],
)
def test_bad_flags_and_values_are_refused_by_name_before_any_work(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from coderl.cli.main import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage error
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2 and said in err, err
    assert "Traceback" not in err


def test_a_group_of_commands_alone_prints_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    from coderl.cli.main import main

    assert main(["bench"]) == 2 and capsys.readouterr().out.startswith("usage: coderl bench ")
    assert main(["sandbox", "image"]) == 2 and capsys.readouterr().out.startswith("usage: coderl sandbox image ")


def test_odd_files_and_resumes_are_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from coderl.cli.main import main

    latin = tmp_path / "latin.yaml"
    latin.write_bytes("run:\n  seed: 1 # caf\xe9\n".encode("latin-1"))
    assert main(["tasks", "list", str(latin)]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err
    run = tmp_path / "r1"
    run.mkdir()
    (run / "config.yaml").write_text("run: {}\n")
    assert main(["train", "--resume", str(run), f"run.dir={tmp_path / 'elsewhere'}"]) == 2
    assert "a resumed run goes on in its own directory" in capsys.readouterr().err
    not_a_db = tmp_path / "notes.sqlite"
    not_a_db.write_text("not a database, " * 100)
    from coderl.errors import ConfigError
    from coderl.proxy.store import Store

    with pytest.raises(ConfigError, match="cannot hold the record"):
        Store(not_a_db).open()
    assert not_a_db.read_text().startswith("not a database")


@pytest.mark.parametrize("command", [["eval"], ["train"], ["sft"], ["tasks", "calibrate"]])
def test_a_model_path_that_is_no_checkpoint_leaves_no_run_folder(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from coderl.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main([*command, f"model.path={tmp_path / 'nope'}"]) == 2
    assert "is not a directory; pass a local Hugging Face checkpoint folder" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
