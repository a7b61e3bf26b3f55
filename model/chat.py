"""Conversations: a list of messages laid out by the model's own chat template.

A chat model carries a template (a Jinja program) that turns ``[{"role", "content"}, ...]`` into
the text the model was trained on, with its markup around each message (``<|im_start|>user\\n``
and the like). :class:`ChatTemplate` applies it exactly as transformers'
``apply_chat_template`` does (it *is* that call, on the model's own transformers tokenizer: a
folder's ``tokenizer_config.json`` / ``chat_template.jinja``, a GGUF file's
``tokenizer.chat_template``), then tokenizes the rendered text with the model's tokenizer and no
added special tokens, as ``apply_chat_template(tokenize=True)`` does. What it adds is where each
message sits: :meth:`ChatTemplate.layout` finds every message's content in the rendered text and
gives each message the half-open range of tokens that carry it (its *span*); every other token is
the template's markup, kind ``"marker"``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROLES = ("system", "user", "assistant")


class ChatError(ValueError):
    """A conversation the template cannot lay out (an order it refuses, a role it does not know)."""


@dataclass
class ChatPrompt:
    """A conversation as the model receives it: ids, each token's display string, its character range in
    its own message's content (``[0, 0]`` for the markup), its kind and each message's token span."""

    ids: list[int]
    tokens: list[str]
    offsets: list[list[int]]
    kinds: list[str]  # "text" inside a message's content, "marker" for the template's markup
    spans: list[dict[str, Any]]  # per message: {"message", "role", "start", "end"} (tokens, half-open)
    text: str  # the rendered template


class ChatTemplate:
    """The model's chat template over its transformers tokenizer ``hf`` (one with ``chat_template`` set)."""

    def __init__(self, hf) -> None:
        self.hf = hf

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        try:
            return self.hf.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)
        except Exception as e:  # noqa: BLE001 -- Jinja's raise_exception and template errors: one line each
            raise ChatError(f"the model's chat template refuses this conversation: {' '.join(str(e).split())}") from e

    def layout(self, tokenizer, messages: list[dict[str, str]], add_generation_prompt: bool) -> ChatPrompt:
        """``messages`` through the template and ``tokenizer`` (:class:`~model.ours.tokenizer.BPETokenizer`)."""
        text = self.render(messages, add_generation_prompt)
        enc = tokenizer.tk.encode(text, add_special_tokens=False)
        ids, offsets = list(enc.ids), [tuple(o) for o in enc.offsets]
        where = content_ranges(text, [m["content"] for m in messages])
        spans, kinds, own = [], ["marker"] * len(ids), [[0, 0] for _ in ids]
        for i, (message, (c0, c1)) in enumerate(zip(messages, where)):
            inside = [t for t, (a, b) in enumerate(offsets) if b > a and a < c1 and b > c0]
            start, end = (inside[0], inside[-1] + 1) if inside else (_first_at(offsets, c0), _first_at(offsets, c0))
            for t in range(start, end):
                kinds[t] = "text"
                a, b = offsets[t]
                own[t] = [max(a, c0) - c0, min(b, c1) - c0]
            spans.append({"message": i, "role": message["role"], "start": start, "end": end})
        tokens = [tokenizer.display(i) for i in ids]
        return ChatPrompt(ids=ids, tokens=tokens, offsets=own, kinds=kinds, spans=spans, text=text)


def content_ranges(text: str, contents: list[str]) -> list[tuple[int, int]]:
    """Where each content stands in the rendered ``text``, searched in order (a template may trim a
    message: its stripped content is searched then); one not found is an empty range where the
    search stood."""
    at, out = 0, []
    for content in contents:
        found, size = text.find(content, at), len(content)
        if (found < 0 or not content) and content.strip():
            found, size = text.find(content.strip(), at), len(content.strip())
        if found < 0 or size == 0:
            out.append((at, at))
            continue
        out.append((found, found + size))
        at = found + size
    return out


def _first_at(offsets: list[tuple[int, int]], c: int) -> int:
    """The first token that starts at or after character ``c``: where an empty message sits."""
    return next((t for t, (a, _) in enumerate(offsets) if a >= c), len(offsets))


def has_template(path: Path) -> bool:
    """Whether a transformers model folder carries a chat template (without loading the tokenizer)."""
    if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
        return True
    config = path / "tokenizer_config.json"
    try:
        return bool(json.loads(config.read_text(encoding="utf-8")).get("chat_template")) if config.is_file() else False
    except (OSError, ValueError):
        return False


def folder_template(path: Path) -> ChatTemplate | None:
    """The chat template of a transformers model folder, read by transformers itself; None without one."""
    if not has_template(path):
        return None
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return ChatTemplate(hf) if getattr(hf, "chat_template", None) else None


def tokenizer_template(hf) -> ChatTemplate | None:
    """A transformers tokenizer's chat template (a GGUF file's ``tokenizer.chat_template`` arrives so)."""
    return ChatTemplate(hf) if getattr(hf, "chat_template", None) else None


def with_chat(facts, template: ChatTemplate | None) -> ChatTemplate | None:
    """``template``, with the model's facts saying whether there is one (``facts.chat``)."""
    facts.chat = template is not None
    return template
