"""Chat templates: how a conversation becomes ``(ids, loss_mask)`` for SFT (and DPO).

**builtin** (trained tokenizers ``bpe`` and ``byte``, ``tiktoken``, and Hugging Face folders
that ship no template): ``<|role|>`` content ``<|end|>`` per turn, then end-of-document.
The loss mask covers assistant content and its ``<|end|>`` (what the model must produce),
nothing else. Role and end markers are special tokens when the vocabulary has them
(bpe, byte), else their text is encoded as ordinary text (tiktoken, foreign hf).

**A Hugging Face template** (an ``hf`` tokenizer whose folder has ``chat_template.jinja``, or
a ``chat_template`` in ``tokenizer_config.json``: a string, or named templates of which
``default`` is taken). It is rendered with jinja2 the way transformers renders it: a
sandboxed, immutable environment with ``trim_blocks``/``lstrip_blocks`` and loop controls,
``raise_exception``, ``strftime_now``, a ``tojson`` that does not escape HTML, the folder's
special tokens (``bos_token``, ``eos_token``, ...) as variables and
``add_generation_prompt=False``. The whole rendered text is then encoded at once (added
tokens in it become their ids; nothing is added around it), so the ids are those of
``apply_chat_template(messages, tokenize=True)``. No end-of-document token is appended: the
template decides how a conversation ends.

The loss mask of a Hugging Face template is a set of character spans of the rendered text,
mapped to tokens through the encoding's offsets: a token is learned when its characters
overlap a span (the rule of transformers' ``return_assistant_tokens_mask``). The spans:

* the template has ``{% generation %}`` blocks: what the blocks render, recorded while
  rendering, so the mask is transformers' ``assistant_masks``; whether the end-of-turn
  token is learned is the template author's choice (inside the block or not).
* it has none: by rendering with a sentinel. For the assistant message ``i``, render the
  conversation with that message's content replaced by a sentinel string (S). The text
  before the sentinel must equal the real rendering's start, and the text after it its
  end: the content is what lies between (so content the template rewrites, such as
  ``| trim``, is located exactly, and text a template appends after the last turn does not
  matter). The end-of-turn text is what follows the content both in S and in S cut after
  message ``i`` (their common prefix: ``<|im_end|>\\n``, not the next turn's header). The span is the content plus the end-of-turn text up to and
  including its first special token (``<|im_end|>``, ``<|eot_id|>``, ``</s>``): the stop
  token the model must produce, not the newline a template writes after it. An
  end-of-turn text without a special token is learned whole. A template that renders the
  content twice, or other text depending on it, is refused (give it generation blocks).
"""

from __future__ import annotations

import json
import logging
import os
import re
from bisect import bisect_left
from collections.abc import Sequence
from contextvars import ContextVar
from datetime import datetime
from functools import lru_cache
from typing import Any, Protocol

from theseus.core.data.errors import DataError
from theseus.data.tokenizers.markers import END_OF_TURN, ROLE_TOKENS, sha256_text

log = logging.getLogger(__name__)

Message = dict[str, str]
Span = tuple[int, int]

BUILTIN = "builtin"
GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
SENTINEL = "[[theseus-assistant-content-5f1c]]"
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")

# While a template renders with tracking on: (blocks rendered so far, generation spans).
_TRACKING: ContextVar[tuple[list[str], list[Span]] | None] = ContextVar("tracking", default=None)
_announced: set[str] = set()


class Tokenizer(Protocol):
    """What a chat template needs of a tokenizer (``base.Tokenizer`` has it; naming the
    protocol here keeps this module from importing the tokenizers that call it)."""

    @property
    def kind(self) -> str: ...

    @property
    def eos_id(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def special_id(self, token: str) -> int | None: ...


class ChatTemplateError(DataError):
    """A chat template cannot render a conversation, or its assistant turns cannot be found."""


# ----------------------------------------------------------------------------- entry points
def template_id(tokenizer: Tokenizer) -> str:
    """``"builtin"``, or the sha256 of the Hugging Face template the tokenizer renders with."""
    source = getattr(tokenizer, "chat_template", None)
    return sha256_text(source) if source else BUILTIN


def encode_chats(
    tokenizer: Tokenizer, chats: Sequence[Sequence[Message]]
) -> list[tuple[list[int], list[int]]]:
    """``(ids, loss_mask)`` of each conversation, in the tokenizer's template."""
    source = getattr(tokenizer, "chat_template", None)
    _announce(tokenizer)
    if not source:
        return encode_builtin(tokenizer, chats)
    return HFTemplate(source, getattr(tokenizer, "chat_tokens", {})).encode(tokenizer, chats)


def render_chat(
    tokenizer: Tokenizer, messages: Sequence[Message], add_generation_prompt: bool = False
) -> str:
    """A conversation as text in the tokenizer's template (for prompting at generation time)."""
    source = getattr(tokenizer, "chat_template", None)
    if source:
        template = HFTemplate(source, getattr(tokenizer, "chat_tokens", {}))
        return template.render(messages, add_generation_prompt=add_generation_prompt)
    text = render_text(messages)
    return text + ROLE_TOKENS["assistant"] if add_generation_prompt else text


def template_source(tokenizer: Tokenizer) -> str:
    """The tokenizer's template as Hugging Face jinja (what an export writes as
    ``chat_template``): its own, else the built-in one in jinja (:func:`builtin_source`)."""
    source = getattr(tokenizer, "chat_template", None)
    return source or builtin_source(tokenizer.decode([tokenizer.eos_id]))


def prompt_ids(tokenizer: Tokenizer, messages: Sequence[Message]) -> list[int]:
    """The ids a model is prompted with to answer ``messages``: the conversation in the
    tokenizer's template with the assistant's turn opened (``add_generation_prompt``),
    encoded as chat data is (the built-in markers as their special ids)."""
    source = getattr(tokenizer, "chat_template", None)
    if source:
        template = HFTemplate(source, getattr(tokenizer, "chat_tokens", {}))
        return list(tokenizer.encode(template.render(messages, add_generation_prompt=True)))
    ids, _ = encode_builtin(tokenizer, [messages])[0]
    return ids[:-1] + marker(tokenizer, ROLE_TOKENS["assistant"])  # no end of document


def stop_ids(tokenizer: Tokenizer) -> list[int]:
    """The ids that end an answer besides the end-of-document one: the built-in template's
    ``<|end|>`` (a Hugging Face template ends a turn with its eos, or what the model's
    generation config names)."""
    if getattr(tokenizer, "chat_template", None):
        return []
    end = tokenizer.special_id(END_OF_TURN)
    return [end] if end is not None else []


def _announce(tokenizer: Tokenizer) -> None:
    which = template_id(tokenizer)
    if which not in _announced:
        _announced.add(which)
        if which == BUILTIN:
            log.info("chat data: the built-in template (<|role|>content<|end|>)")
        else:
            log.info("chat data: the tokenizer's Hugging Face chat template (sha256 %s)", which)


# ----------------------------------------------------------------------------- builtin
def marker(tokenizer: Tokenizer, token: str) -> list[int]:
    special = tokenizer.special_id(token)
    return [special] if special is not None else tokenizer.encode(token)


def render_text(messages: Sequence[Message]) -> str:
    """The built-in template as text (for display and for prompting at generation time)."""
    return "".join(f"{ROLE_TOKENS[m['role']]}{m['content']}{END_OF_TURN}" for m in messages)


def builtin_source(eos: str) -> str:
    """The built-in template as a Hugging Face jinja template: :func:`render_text`'s turns,
    then ``eos`` (the end of a document, as chat data ends), or ``<|assistant|>`` with
    ``add_generation_prompt``. A role it has no marker for is refused."""
    markers = "{" + ", ".join(f"{role!r}: {token!r}" for role, token in ROLE_TOKENS.items()) + "}"
    known = ", ".join(ROLE_TOKENS)
    return (
        f"{{% set markers = {markers} %}}"
        "{% for message in messages %}"
        "{% if message['role'] not in markers %}"
        f"{{{{ raise_exception('the chat template has the roles {known}, not ' + message['role']) }}}}"
        "{% endif %}"
        f"{{{{ markers[message['role']] + message['content'] + {END_OF_TURN!r} }}}}"
        "{% endfor %}"
        f"{{% if add_generation_prompt %}}{{{{ {ROLE_TOKENS['assistant']!r} }}}}"
        f"{{% else %}}{{{{ {eos!r} }}}}{{% endif %}}"
    )


def encode_builtin(
    tokenizer: Tokenizer, chats: Sequence[Sequence[Message]]
) -> list[tuple[list[int], list[int]]]:
    """The built-in template, contents encoded in one batch."""
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


# ----------------------------------------------------------------------------- Hugging Face
class HFTemplate:
    """A Hugging Face chat template, compiled once, with its special-token variables."""

    def __init__(self, source: str, tokens: dict[str, str]) -> None:
        self.source = source
        self.template = _compile(source)
        self.variables = dict(tokens)
        self.has_generation = bool(GENERATION_TAG.search(source))

    def render(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = False,
        spans: list[Span] | None = None,
    ) -> str:
        """The rendered text; with ``spans``, the generation blocks' spans are appended to it."""
        import jinja2

        variables = {
            **self.variables,
            "messages": [_plain_message(m) for m in messages],
            "tools": None,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
        }
        try:
            if spans is None:
                return self.template.render(**variables)
            blocks: list[str] = []
            token = _TRACKING.set((blocks, spans))
            try:
                for block in self.template.generate(**variables):
                    blocks.append(block)  # one at a time: a generation block measures them
            finally:
                _TRACKING.reset(token)
            return "".join(blocks)
        except jinja2.TemplateError as error:
            message = f"the chat template cannot render a conversation: {error}"
            raise ChatTemplateError(message) from error

    def encode(
        self, tokenizer: Tokenizer, chats: Sequence[Sequence[Message]]
    ) -> list[tuple[list[int], list[int]]]:
        encode = getattr(tokenizer, "encode_with_offsets", None)
        if encode is None:
            raise ChatTemplateError(
                f"tokenizer kind {tokenizer.kind!r} has a chat_template but cannot give "
                "character offsets (encode_with_offsets), which the loss mask needs"
            )
        texts, generated = [], []
        for chat in chats:
            spans: list[Span] = []
            texts.append(self.render(chat, spans=spans if self.has_generation else None))
            generated.append(spans)
        special: frozenset[int] = getattr(tokenizer, "special_ids", frozenset())
        out = []
        for chat, text, spans, (ids, offsets) in zip(
            chats, texts, generated, encode(texts), strict=True
        ):
            if not self.has_generation:
                spans = self.assistant_spans(chat, text, ids, offsets, special)
            out.append((list(ids), token_mask(offsets, spans)))
        return out

    def assistant_spans(
        self,
        chat: Sequence[Message],
        full: str,
        ids: Sequence[int],
        offsets: Sequence[Span],
        special: frozenset[int],
    ) -> list[Span]:
        """Each assistant turn's content and stop token, found by rendering with a sentinel."""
        spans = []
        starts = [s for s, _ in offsets]
        for i, message in enumerate(chat):
            if message.get("role") != "assistant":
                continue
            through = [*chat[:i], {**message, "content": SENTINEL}]
            probe = self.render([*through, *chat[i + 1 :]])
            start, after = _split(probe, i)
            end = len(full) - len(after)
            if end < start or full[:start] != probe[:start] or not full.endswith(after):
                raise _unlocated(i)
            ending = after if i + 1 == len(chat) else _split(self.render(through), i)[1]
            closing = end + len(os.path.commonprefix([after, ending]))
            stop = closing  # through the first special token of the closing text, if any
            for k in range(bisect_left(starts, end), len(ids)):
                if offsets[k][1] > closing:
                    break
                if ids[k] in special:
                    stop = offsets[k][1]
                    break
            spans.append((start, stop))
        return spans


def _split(probe: str, index: int) -> tuple[int, str]:
    """Where the sentinel starts in a rendering, and the text after it."""
    if probe.count(SENTINEL) != 1:
        raise _unlocated(index)
    start = probe.index(SENTINEL)
    return start, probe[start + len(SENTINEL) :]


def _unlocated(index: int) -> ChatTemplateError:
    return ChatTemplateError(
        f"cannot locate the assistant content of message {index} in the chat template's "
        "rendering (the template renders it more than once, or renders other text "
        "depending on it): mark the assistant output with "
        "{% generation %}...{% endgeneration %} in the template"
    )


def token_mask(offsets: Sequence[Span], spans: Sequence[Span]) -> list[int]:
    """1 for each token whose characters overlap one of the (ordered) spans, else 0."""
    mask = [0] * len(offsets)
    index = 0
    for token, (start, end) in enumerate(offsets):
        while index < len(spans) and start >= spans[index][1]:
            index += 1
        if index == len(spans):
            break
        if end > spans[index][0]:
            mask[token] = 1
    return mask


def _plain_message(message: Message) -> dict[str, Any]:
    """A copy without None values, reasoning under the names templates read (as transformers)."""
    plain = {key: value for key, value in message.items() if value is not None}
    reasoning = next((plain[k] for k in REASONING_FIELDS if plain.get(k) is not None), None)
    if reasoning is not None:
        plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
    return plain


# ----------------------------------------------------------------------------- jinja2
@lru_cache(maxsize=16)
def _compile(source: str) -> Any:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """``{% generation %}...{% endgeneration %}``: renders its body, recording its span."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_record"), [], [], body).set_lineno(lineno)

        def _record(self, caller: Any) -> str:
            text = caller()
            tracking = _TRACKING.get()
            if tracking is not None:
                blocks, spans = tracking
                start = sum(len(block) for block in blocks)
                spans.append((start, start + len(text)))
            return text

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
            sort_keys=sort_keys,
        )  # fmt: skip

    def strftime_now(format: str) -> str:
        return datetime.now().strftime(format)

    class SafeDict:
        """``dict(...)`` in a template, without the type's attributes."""

        def __call__(self, *args: Any, **kwargs: Any) -> dict:
            return dict(*args, **kwargs)

    class SafeNamespace(jinja2.utils.Namespace):
        """``namespace(...)`` refusing underscore names (no way to CPython internals)."""

        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            for name in dict(*rest, **kwargs):
                SafeNamespace.check(name)
            jinja2.utils.Namespace.__init__(self, *rest, **kwargs)

        def __setitem__(self, name: str, value: Any) -> None:
            SafeNamespace.check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} refused")

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals.update(
        raise_exception=raise_exception,
        strftime_now=strftime_now,
        dict=SafeDict(),
        namespace=SafeNamespace,
    )
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as error:
        raise ChatTemplateError(f"the chat template is not valid jinja: {error}") from error
