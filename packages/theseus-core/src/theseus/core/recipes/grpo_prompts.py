"""How a GRPO task's questions become prompts, and where a completion ends.

A prompt is the question as a user's message in the tokenizer's chat template with the
assistant's turn opened (the template the SFT data was rendered with: a Hugging Face
tokenizer's own, else the built-in ``<|user|>question<|end|><|assistant|>``), through the
tokenizer's ``chat_prompt``; a completion ends at the tokenizer's end of document or the
template's end of turn (``chat_stops``). A tokenizer without those (a plugin's that knows
no chat) gets the built-in markers, special tokens when the vocabulary has them, else their
text. Padding uses the tokenizer's pad id.
"""

from __future__ import annotations

from theseus.core.errors import ConfigError
from theseus.core.tokenizer import Tokenizer


class PromptFormat:
    """Prompts and stop tokens of one tokenizer."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.pad_id = int(tokenizer.pad_id)
        self.stops = [int(tokenizer.eos_id)]
        chat_stops = getattr(tokenizer, "chat_stops", None)
        if callable(chat_stops):
            ends = [int(t) for t in chat_stops()]
        else:
            end = tokenizer.special_id("<|end|>")  # the built-in template's end of turn
            ends = [] if end is None else [int(end)]
        self.stops += [t for t in ends if t not in self.stops]

    def marker(self, token: str) -> list[int]:
        found = self.tokenizer.special_id(token)
        return [found] if found is not None else list(self.tokenizer.encode(token))

    def prompt(self, question: str) -> list[int]:
        """The question as a user's message, the assistant's turn opened."""
        chat_prompt = getattr(self.tokenizer, "chat_prompt", None)
        if callable(chat_prompt):
            return [int(t) for t in chat_prompt([{"role": "user", "content": question}])]
        user = list(self.tokenizer.encode(question))
        return (
            self.marker("<|user|>") + user + self.marker("<|end|>") + self.marker("<|assistant|>")
        )


def check_room(longest_prompt: int, max_new_tokens: int, seq_len: int) -> None:
    """Refuse a task whose longest prompt and completion do not fit a training row."""
    if longest_prompt + max_new_tokens - 1 > seq_len:
        raise ConfigError(
            f"a prompt of {longest_prompt} tokens + grpo.max_new_tokens={max_new_tokens}"
            f" does not fit training.seq_len={seq_len}: raise it or lower the other"
        )
