"""Conversations in an atlas corpus: where each message's tokens fall in the corpus's token stream.

A ``.jsonl`` line ``{"messages": [{"role", "content"}, ...]}`` is a :class:`Conversation`; the corpus
lays it out with the model's chat template (:class:`~model.chat.ChatTemplate`, no generation prompt:
the conversation as written) and :class:`MessageIndex` keeps, for each message, the range of its
content tokens in the stream of all documents laid end to end. The windows cut that stream in order
(window ``w`` starts at token ``w * seq_len``), so an exemplar's window and position give its token's
place in the stream, and :meth:`MessageIndex.find` the message it sits in.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ..chat import ROLES


@dataclass(frozen=True)
class Conversation:
    """One conversation of a corpus: its messages, each ``{"role", "content"}``."""

    messages: tuple[dict, ...]


def conversation_of(obj: dict) -> Conversation | str:
    """A JSONL line's ``messages`` as a :class:`Conversation`, or why it is not one (a string)."""
    messages = obj["messages"]
    if not isinstance(messages, list) or not messages:
        return "'messages' is not a non-empty list"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            return f"message {i} is not {{\"role\": {' | '.join(ROLES)}, \"content\": a string}}"
    return Conversation(tuple({"role": m["role"], "content": m["content"]} for m in messages))


@dataclass
class MessageIndex:
    """Each message's content tokens as a range of the corpus's token stream, in stream order."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    where: list[tuple[int, int, str]] = field(default_factory=list)  # (conversation, message, role)
    conversations: int = 0

    def add(self, at: int, spans: list[dict]) -> None:
        """A conversation whose first token is token ``at`` of the stream, with its spans (model.chat)."""
        for span in spans:
            self.starts.append(at + span["start"])
            self.ends.append(at + span["end"])
            self.where.append((self.conversations, span["message"], span["role"]))
        self.conversations += 1

    def find(self, token: int) -> tuple[int, int, str] | None:
        """(conversation, message, role) of the message holding stream token ``token``; None outside every message."""
        i = bisect.bisect_right(self.starts, token) - 1
        return self.where[i] if i >= 0 and token < self.ends[i] else None

