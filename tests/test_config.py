from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from coderl.config import Config, dump_config, load_config
from coderl.errors import ConfigError
from coderl.rundir import create_run_dir


def test_defaults() -> None:
    cfg = load_config(env={})
    assert cfg.engine.type == "embedded"
    assert cfg.model.path is None
    assert cfg.engine.max_batch_size == 16


def test_precedence_cli_over_env_over_yaml(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("engine:\n  max_batch_size: 4\n  prefill_chunk: 128\n  max_queued: 7\nrun:\n  seed: 3\n")
    env = {
        "CODERL_ENGINE__MAX_BATCH_SIZE": "6",
        "CODERL_ENGINE__PREFILL_CHUNK": "256",
        "CODERL_CACHE_DIR": "/x",
    }
    cfg = load_config(path, ["engine.max_batch_size=9"], env=env)
    assert cfg.engine.max_batch_size == 9  # CLI beats env and YAML
    assert cfg.engine.prefill_chunk == 256  # env beats YAML
    assert cfg.engine.max_queued == 7  # YAML beats default
    assert cfg.run.seed == 3
    assert cfg.engine.max_retries == 2  # default


def test_values_parse_as_yaml() -> None:
    cfg = load_config(
        overrides=[
            "engine.type=http",
            "engine.urls=[http://127.0.0.1:1, http://127.0.0.1:2]",
            "model.dtype=bfloat16",
        ],
        env={},
    )
    assert cfg.engine.urls == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert cfg.model.dtype == "bfloat16"


@pytest.mark.parametrize(
    ("override", "must_mention"),
    [
        ("engine.max_batch_sise=8", ["engine.max_batch_sise", "max_batch_size"]),
        ("engine.max_batch_size=lots", ["engine.max_batch_size", "'lots'", "integer"]),
        ("engine.max_batch_size=0", ["engine.max_batch_size", "0", "greater than or equal to 1"]),
        ("model.dtype=fp8", ["model.dtype", "'fp8'", "'float32'", "'bfloat16'"]),
        ("engine.type=grpc", ["engine.type", "'grpc'", "'embedded'", "'http'"]),
        ("engine=3", ["'engine' is a section"]),
        ("nosuch.key=1", ["nosuch", "engine", "model"]),
        ("model.path.x=1", ["model.path", "no sub-keys"]),
        ("justtext", ["key.sub=value"]),
        ("engine.type=http", ["engine.urls"]),
    ],
)
def test_bad_overrides_name_key_value_and_allowed(override: str, must_mention: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(overrides=[override], env={})
    for text in must_mention:
        assert text in str(err.value), (text, str(err.value))


def test_bad_env_var_is_named() -> None:
    with pytest.raises(ConfigError, match="CODERL_ENGINE__NOPE"):
        load_config(env={"CODERL_ENGINE__NOPE": "1"})


def test_unknown_yaml_key_lists_valid_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("engine:\n  max_batch: 4\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert "engine.max_batch" in str(err.value) and "max_batch_size" in str(err.value)


def test_missing_and_malformed_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", env={})
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad, env={})
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(listy, env={})


def test_run_dir_holds_resolved_config(tmp_path: Path) -> None:
    cfg = load_config(overrides=[f"run.dir={tmp_path / 'r'}", "engine.max_batch_size=3"], env={})
    run = create_run_dir(cfg, "demo")
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["engine"]["max_batch_size"] == 3
    assert Config.model_validate(saved) == cfg  # the stored config round-trips
    assert dump_config(cfg) == (run / "config.yaml").read_text()


def test_a_run_dir_is_never_another_runs(tmp_path: Path) -> None:
    """No command writes into another command's run, or over a finished one, or into a file; a folder
    holding only a config.yaml (a bench lays one out) and a resumed train run are reused."""
    from coderl.cli.main import main

    def at(path: Path) -> Config:
        return load_config(overrides=[f"run.dir={path}"], env={})

    train = create_run_dir(at(tmp_path / "t"), "train")
    (train / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match=r"holds a coderl train run; eval would overwrite its config.yaml"):
        create_run_dir(at(train), "eval")
    with pytest.raises(ConfigError, match=r"already holds a run \(metrics.jsonl\).*coderl train --resume"):
        create_run_dir(at(train), "train")
    assert create_run_dir(at(train), "train", resume=True) == train
    laid_out = tmp_path / "bench"
    laid_out.mkdir()
    (laid_out / "config.yaml").write_text("run: {}\n")
    assert create_run_dir(at(laid_out), "eval") == laid_out
    (laid_out / "eval.log").write_text("an attempt that made nothing else\n")  # tried again in its folder
    assert create_run_dir(at(laid_out), "eval") == laid_out
    (laid_out / "trajectories").mkdir()
    with pytest.raises(ConfigError, match=r"already holds a run \(trajectories\)"):
        create_run_dir(at(laid_out), "eval")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        create_run_dir(at(tmp_path / "f"), "eval")
    with pytest.raises(ConfigError, match="cannot write the run there"):
        create_run_dir(at(Path("/proc/coderl-no-such/run")), "eval")
    evaluated = create_run_dir(at(tmp_path / "e"), "eval")
    assert main(["train", "--resume", str(evaluated)]) == 2  # refused before any model loads


def test_default_run_dirs_started_in_one_second_are_two(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("coderl.rundir.time.strftime", lambda fmt: "20261201-000000")
    cfg = load_config(overrides=[], env={})
    first = create_run_dir(cfg, "eval")
    (first / "trajectories.jsonl").write_text("")
    second = create_run_dir(cfg, "eval")
    assert (first.name, second.name) == ("eval-20261201-000000", "eval-20261201-000000-2")


def test_every_field_is_documented() -> None:
    from pydantic import BaseModel

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann, f"{prefix}{name}.")
            else:
                assert field.description, f"{prefix}{name} has no docstring"

    walk(Config, "")


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["train.group_size=1"], "train.group_size"),  # GRPO compares a task's samples with each other
        (["train.group_size=1", "algo.advantage=reinforce_pp", "algo.dynamic_sampling=true"], "algo.dynamic_sampling"),
        (["algo.advantage=gae", "actor.packing=false"], "actor.packing"),  # the value head reads the packed forward
        (["train.weight_sync=lora"], "actor.lora_rank"),  # no adapter to send
        (["algo.kl_coef=0.1"], "actor.reference"),  # a KL penalty needs a reference policy
        (["rollout.pass_k=[1,4]"], "rollout.group_size"),  # pass@4 needs 4 samples per task
        (["rollout.agent=remote"], "rollout.remote_command"),  # the remote loop runs an agent program
        (["cluster.engine_replicas=1"], "cluster.engine_replicas"),  # replicas are Ray actors
        (["cluster.backend=ray", "cluster.engine_replicas=1", "cluster.engine_server=vllm"], "cluster.engine_server"),
        (["cluster.actor=ray"], "cluster.actor"),  # the ranks go on the Ray cluster the run joins
    ],
)
def test_rules_across_sections_fail_every_command_before_any_work(overrides: list[str], named: str) -> None:
    with pytest.raises(ConfigError, match=named) as caught:
        load_config(overrides=overrides)
    assert "\n  " in str(caught.value) and "Value error" not in str(caught.value)
    fixed = {
        "train.group_size": ["train.group_size=2"],
        "algo.dynamic_sampling": ["algo.dynamic_sampling=false"],
        "actor.packing": ["actor.packing=true"],
        "actor.lora_rank": ["actor.lora_rank=4"],
        "actor.reference": ["actor.reference=true"],
        "rollout.group_size": ["rollout.group_size=4"],
        "rollout.remote_command": ["rollout.remote_command=mini --yolo"],
        "cluster.engine_replicas": ["cluster.backend=ray"],
        "cluster.engine_server": ["actor.lora_rank=4"],  # vLLM takes LoRA adapters at run time
        "cluster.actor": ["cluster.backend=ray"],
    }[named]
    load_config(overrides=[*overrides, *fixed])  # the way out the message names works


def test_every_broken_rule_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=["train.group_size=1", "algo.kl_coef=0.5", "rollout.pass_k=[2]"])
    text = str(caught.value)
    assert "train.group_size" in text and "actor.reference" in text and "rollout.pass_k" in text


def test_each_section_is_owned_by_its_package() -> None:
    import coderl.config.models as assembled

    owners = {name: field.annotation.__module__ for name, field in Config.model_fields.items()}  # type: ignore[union-attr]
    assert owners == {
        "run": assembled.__name__, "server": assembled.__name__, "model": "coderl.engine.config",
        "engine": "coderl.engine.config", "sandbox": "coderl.sandbox.config", "tasks": "coderl.tasks.config",
        "rollout": "coderl.rollout.config", "proxy": "coderl.proxy.config", "relay": "coderl.proxy.config",
        "train": "coderl.train.config", "algo": "coderl.rl.config", "actor": "coderl.train.config",
        "sft": "coderl.train.config", "cluster": "coderl.cluster.config",
    }  # fmt: skip


def test_a_config_key_in_the_environment_with_one_underscore_is_named() -> None:
    """CODERL_ENGINE_MAX_BATCH_SIZE was ignored without a word (config keys join with '__'); other
    CODERL_ variables (CODERL_CACHE_DIR, CODERL_SANDBOX_DIR) are no config keys and stay allowed."""
    with pytest.raises(ConfigError, match=r"for engine\.max_batch_size write CODERL_ENGINE__MAX_BATCH_SIZE=8"):
        load_config(env={"CODERL_ENGINE_MAX_BATCH_SIZE": "8"})
    cfg = load_config(env={"CODERL_CACHE_DIR": "/x", "CODERL_SANDBOX_DIR": "/y", "CODERL_ENGINE__MAX_BATCH_SIZE": "8"})
    assert cfg.engine.max_batch_size == 8
