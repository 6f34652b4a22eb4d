"""The built-in advice model: a tiny Llama the project builds itself, offline, in minutes.

- `make_tiny_random_model(out_dir, seed)`: random weights, real tokenizer + template (tests).
- `build_builtin_model(data_dir, force=, progress=)`: tokenizer + attribute-conditioned SFT on
  the shipped advice corpus, cached under `data_dir/models/builtin-<recipe hash>/`.
- `builtin_model_path(data_dir)`: where that cached model lives (may not exist yet).
"""

from chat.builtin.build import build_builtin_model, builtin_model_path, is_built
from chat.builtin.template import CHAT_TEMPLATE, SPECIAL_TOKENS
from chat.builtin.tiny import make_tiny_random_model

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "build_builtin_model", "builtin_model_path", "is_built",
           "make_tiny_random_model"]
