"""How a GRPO task's questions become prompts, and where a completion ends.

A prompt is the question as the chat data renders a user turn followed by the assistant's
header (``<|user|>question<|end|><|assistant|>``, the markers special tokens when the
vocabulary has them, else their text); a completion ends at the tokenizer's end of
document or the end-of-turn marker. Padding uses the tokenizer's pad id.
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
        end = tokenizer.special_id("<|end|>")  # the chat template's end of turn
        if end is not None:
            self.stops.append(int(end))

    def marker(self, token: str) -> list[int]:
        found = self.tokenizer.special_id(token)
        return [found] if found is not None else list(self.tokenizer.encode(token))

    def prompt(self, question: str) -> list[int]:
        """``<|user|>question<|end|><|assistant|>`` as the SFT data renders a chat."""
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
