"""``dtype: auto`` (coderl.hardware): bfloat16 where the CPU has bfloat16 instructions, float32 where it
would emulate them; resolved when the config is read, so a run's config.yaml holds the dtype that ran."""

from __future__ import annotations

import sys

import pytest
import yaml

from coderl import hardware
from coderl.config import load_config
from coderl.config.loader import dump_config


@pytest.fixture
def flags(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The CPU's flags as the test sets them."""
    chosen: set[str] = set()
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset(chosen))
    return chosen


def test_auto_is_bfloat16_only_where_the_cpu_computes_it(flags: set[str]) -> None:
    flags |= {"avx2", "fma", "avx512f"}  # AVX-512 without BF16: emulated
    assert hardware.auto_dtype("cpu") == "float32"
    assert "no bfloat16 instructions" in hardware.describe_bf16("cpu")
    for native in ("amx_bf16", "avx512_bf16", "bf16"):  # AMX, AVX-512 BF16, Arm's BF16 extension
        flags.clear()
        flags |= {"avx2", native}
        assert hardware.auto_dtype("cpu") == "bfloat16"
        assert native in hardware.describe_bf16("cpu")


def test_a_config_resolves_auto_and_records_the_dtype_that_ran(flags: set[str]) -> None:
    flags.add("avx2")
    cfg = load_config(None, ["model.dtype=auto", "model.device=cpu", "actor.dtype=auto", "actor.device=cpu"])
    assert (cfg.model.dtype, cfg.actor.dtype) == ("float32", "float32")
    saved = yaml.safe_load(dump_config(cfg))
    assert saved["model"]["dtype"] == "float32" and saved["actor"]["dtype"] == "float32"
    flags.add("amx_bf16")
    cfg = load_config(None, ["model.dtype=auto", "model.device=cpu", "actor.dtype=auto", "actor.device=cpu"])
    assert (cfg.model.dtype, cfg.actor.dtype) == ("bfloat16", "bfloat16")
    # a dtype named outright is kept whatever the CPU
    assert load_config(None, ["model.dtype=bfloat16"]).model.dtype == "bfloat16"
    flags.clear()
    assert load_config(None, ["model.dtype=bfloat16"]).model.dtype == "bfloat16"


def test_the_packaged_recipe_asks_for_auto() -> None:
    from coderl.config.packaged import TRAIN_DEFAULTS, packaged_config

    packaged = yaml.safe_load(packaged_config(TRAIN_DEFAULTS).read_text())
    assert packaged["model"]["dtype"] == "auto" and packaged["actor"]["dtype"] == "auto"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/cpuinfo")
def test_this_machines_flags_are_read() -> None:
    hardware.cpu_flags.cache_clear()
    assert hardware.cpu_flags()  # every Linux CPU lists some
    assert hardware.auto_dtype("cpu") in ("float32", "bfloat16")
