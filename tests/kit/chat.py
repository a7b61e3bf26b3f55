"""Tiny chat models for the conversation tests: a Qwen2 transformers folder (the shipped byte-level
tokenizer, random weights with q/k scaled up) carrying a chat template whose markup is the special
token ``<|endoftext|>`` (as a real template's ``<|im_start|>`` is one token: no piece of markup merges
with a message), and a Llama GGUF file with a template in ``tokenizer.chat_template``."""

from __future__ import annotations

import json
from pathlib import Path

from . import gguf as gguf_kit
from .family import build


def template(opening: str, closing: str) -> str:
    """Each turn: ``opening``, the role, a newline, the content, ``closing`` and a newline; the assistant's
    opening when the model answers next. A conversation that opens with the assistant is refused, as
    many templates refuse an order."""
    return (
        "{% if messages[0]['role'] == 'assistant' %}"
        "{{ raise_exception('a conversation opens with the system or the user') }}"
        "{% endif %}"
        f"{{% for m in messages %}}{{{{ '{opening}' + m['role'] + '\\n' + m['content'] + '{closing}\\n' }}}}"
        "{% endfor %}"
        f"{{% if add_generation_prompt %}}{{{{ '{opening}assistant\\n' }}}}{{% endif %}}"
    )


TEMPLATE = template("<|endoftext|>", "<|endoftext|>")  # the shipped tokenizer's one special token
GGUF_TEMPLATE = template("<s>", "</s>")  # the Llama GGUF's SentencePiece specials


CONVERSATION = [
    {"role": "system", "content": "You answer in one word."},
    {"role": "user", "content": "What colour is the sky?"},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "And the grass?"},
]


def build_chat(out: Path, seed: int = 0) -> Path:
    """A tiny Qwen2 with :data:`TEMPLATE` in its tokenizer_config.json, written to ``out``."""
    build("qwen2", out, seed=seed)
    config_file = out / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["chat_template"] = TEMPLATE
    config_file.write_text(json.dumps(config))
    return out


def write_chat_gguf(out: Path) -> Path:
    """A tiny Llama GGUF file with :data:`TEMPLATE` as ``tokenizer.chat_template``."""
    return gguf_kit.write("llama", out, chat_template=GGUF_TEMPLATE)


def hf_ids(folder: Path, messages: list[dict], add_generation_prompt: bool, **where) -> list[int]:
    """transformers' own ids for ``messages``: the oracle."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True, **where)
    got = tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
    return list(got["input_ids"] if hasattr(got, "keys") else got)
