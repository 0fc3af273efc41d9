"""The chat template: ``<|role|>`` content ``<|end|>`` per turn, then end-of-document.

The loss mask covers assistant content and its ``<|end|>`` (what the model must produce),
nothing else. Role and end markers are special tokens when the vocabulary has them
(bpe, byte), else their text is encoded as ordinary text (tiktoken, foreign hf).
"""

from __future__ import annotations

from collections.abc import Sequence

from theseus.data.tokenizers.base import END_OF_TURN, ROLE_TOKENS, Tokenizer

Message = dict[str, str]


def marker(tokenizer: Tokenizer, token: str) -> list[int]:
    special = tokenizer.special_id(token)
    return [special] if special is not None else tokenizer.encode(token)


def render_text(messages: Sequence[Message]) -> str:
    """The template as text (for display and for prompting at generation time)."""
    return "".join(f"{ROLE_TOKENS[m['role']]}{m['content']}{END_OF_TURN}" for m in messages)


def encode_chats(
    tokenizer: Tokenizer, chats: Sequence[Sequence[Message]]
) -> list[tuple[list[int], list[int]]]:
    """``(ids, loss_mask)`` of each conversation, contents encoded in one batch."""
    contents = tokenizer.encode_batch([m["content"] for chat in chats for m in chat])
    roles = {role: marker(tokenizer, token) for role, token in ROLE_TOKENS.items()}
    end = marker(tokenizer, END_OF_TURN)
    out = []
    position = 0
    for chat in chats:
        ids: list[int] = []
        mask: list[int] = []
        for message in chat:
            content = contents[position]
            position += 1
            learn = 1 if message["role"] == "assistant" else 0
            ids += roles[message["role"]]
            mask += [0] * len(roles[message["role"]])
            ids += content + end
            mask += [learn] * (len(content) + len(end))
        ids.append(tokenizer.eos_id)
        mask.append(0)
        out.append((ids, mask))
    return out
