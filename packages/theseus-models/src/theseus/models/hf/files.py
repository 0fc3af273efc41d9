"""Reading a Hugging Face folder's files, without JAX: what a refusal needs, so a damaged
folder is named in one line before anything heavy is imported."""

from __future__ import annotations

from pathlib import Path

from theseus.core import safe_json
from theseus.core.requirements import require
from theseus.models.errors import ModelError


def resolve(directory: str | Path) -> Path:
    """A local checkpoint directory; a hub id is downloaded when ``huggingface_hub`` can."""
    path = Path(directory)
    if path.exists() or str(directory).count("/") != 1:
        return path
    feature = f"{directory}: not a local directory; downloading it as a hub id"
    hub = require("huggingface_hub", feature, error=ModelError)
    try:
        patterns = ["*.json", "*.safetensors", "*.jinja"]  # config, weights, tokenizer
        return Path(hub.snapshot_download(str(directory), allow_patterns=patterns))
    except Exception as error:  # offline, unknown id
        raise ModelError(
            f"{directory}: not a local directory and not downloadable as a hub id ({error})"
        ) from error


def read_config(directory: str | Path) -> dict:
    """``DIR/config.json`` as a dict; one line naming the file when it is missing, not JSON,
    or not a JSON object."""
    path = Path(directory) / "config.json"
    if not Path(directory).is_dir():
        raise ModelError(f"{directory} is not a folder (a transformers checkpoint is a folder)")
    if not path.is_file():
        raise ModelError(f"{directory}: no config.json (not a transformers checkpoint directory)")
    try:
        hf = safe_json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ModelError(f"{path} is not a JSON config ({' '.join(str(error).split())})") from error
    if not isinstance(hf, dict):
        raise ModelError(f"{path} holds a JSON {type(hf).__name__}, not an object of config keys")
    return hf


def check_tensor_files(directory: str | Path) -> list[Path]:
    """The folder's ``*.safetensors`` files, each opened once (its header read and checked
    against its size, no tensor loaded): one line naming a file that is truncated or not a
    safetensors file, before any work."""
    from safetensors import safe_open

    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise ModelError(f"{directory}: no *.safetensors files")
    for file in files:
        try:
            with safe_open(str(file), framework="numpy") as f:
                f.keys()
        except Exception as error:  # SafetensorError (Rust), OSError
            raise ModelError(
                f"{file} is not a readable safetensors file ({' '.join(str(error).split())}): "
                "it may be truncated; download or copy it again"
            ) from error
    return files
