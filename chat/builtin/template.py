"""The built-in model's chat format: special tokens and the Jinja chat template.

This is the shared contract every backend, trainer and server codes against (see the
template spec in DESIGN notes): one line per role header, `<|end|>` closes every turn and is
the EOS token, and the SteerLM attribute string sits on its own line right after the
assistant header, so attribute-conditioned SFT learns "header, attributes, answer" and a
generation prompt can pin the attributes before the model writes a word.

Assistant content (with its closing `<|end|>`) is wrapped in `{% generation %}` markers so
TRL's `assistant_only_loss` and `return_assistant_tokens_mask` find the trained span. The
attribute line is deliberately outside the markers: it is the condition, not the output.
"""

from __future__ import annotations

SYSTEM, USER, ASSISTANT = "<|system|>", "<|user|>", "<|assistant|>"
ATTRIBUTES, END, PAD = "<|attributes|>", "<|end|>", "<|pad|>"

# Order fixes their ids (0..5) in every tokenizer we train.
SPECIAL_TOKENS: tuple[str, ...] = (PAD, END, SYSTEM, USER, ASSISTANT, ATTRIBUTES)

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|assistant|>\\n' -}}"
    "{%- if message['attributes'] is defined and message['attributes'] -%}"
    "{{- '<|attributes|>' + message['attributes'] + '\\n' -}}"
    "{%- endif -%}"
    "{%- generation -%}{{- message['content'] + '<|end|>' -}}{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- elif message['role'] in ['system', 'user'] -%}"
    "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' -}}"
    "{%- else -%}"
    "{{- raise_exception('unsupported role ' + message['role'] + '; use system, user or assistant') -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|assistant|>\\n' -}}"
    "{%- if attributes is defined and attributes -%}"
    "{{- '<|attributes|>' + attributes + '\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


def render(messages: list[dict], *, add_generation_prompt: bool = False, attributes: str | None = None) -> str:
    """Pure-Python rendering of CHAT_TEMPLATE, for building training text without Jinja."""
    parts: list[str] = []
    for m in messages:
        role = m["role"]
        if role == "assistant":
            attr = m.get("attributes")
            parts.append(ASSISTANT + "\n" + (f"{ATTRIBUTES}{attr}\n" if attr else "") + m["content"] + END + "\n")
        elif role in ("system", "user"):
            parts.append(f"<|{role}|>\n{m['content']}{END}\n")
        else:
            raise ValueError(f"unsupported role {role!r}; use system, user or assistant")
    if add_generation_prompt:
        parts.append(ASSISTANT + "\n" + (f"{ATTRIBUTES}{attributes}\n" if attributes else ""))
    return "".join(parts)
