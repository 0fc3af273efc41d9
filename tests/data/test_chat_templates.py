"""Hugging Face chat templates: ids and assistant loss masks as transformers makes them.

The tokenizer folders are built here, offline: a byte-level BPE trained on a few strings
(tokenizer.json) plus a tokenizer_config.json and/or chat_template.jinja with a template
written for these tests (ChatML with generation blocks, Llama-3 and Zephyr styles without).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
from datatest_helpers import tokenize
from theseus.core.data import TokenizedDataset
from theseus.core.data.api import find_dataset
from theseus.data.tokenizers import load_tokenizer
from theseus.data.tokenizers.base import sha256_text
from theseus.data.tokenizers.chat_template import (
    GENERATION_TAG,
    ChatTemplateError,
    encode_chats,
    render_chat,
    template_id,
)
from theseus.data.tokenizers.huggingface import HFConfig, HFTokenizer

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = pytest.mark.skipif(
    not HAVE_TRANSFORMERS, reason="transformers (the `parity` dependency group) is not installed"
)

SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "</s>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
]
CORPUS = [
    "You are a helpful assistant. Answer briefly.",
    "What is the capital of France? The capital of France is Paris.",
    "Tell me a joke about cats. Why did the cat sit on the computer? To keep an eye on the mouse!",
    "system user assistant: 12+30=42, café, naïve, 東京 😀",
    "def add(a, b):\n    return a + b\n\n",
] * 3

# ChatML (Qwen-like): a default system turn; the assistant's content and <|im_end|> learned.
CHATML_GENERATION = """\
{%- if messages[0]['role'] != 'system' %}
{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message['role'] == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
{%- generation %}
{{- message['content'] + '<|im_end|>' }}
{%- endgeneration %}
{{- '\\n' }}
{%- else %}
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Llama-3 style: bos_token variable, trimmed contents, <|eot_id|> ends every turn.
LLAMA3 = """\
{{- bos_token }}
{%- for message in messages %}
{%- if message['role'] not in ['system', 'user', 'assistant'] %}
{{- raise_exception('unknown role ' + message['role']) }}
{%- endif %}
{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}
{{- message['content'] | trim }}
{{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# Zephyr style: block tags on their own lines (trim_blocks/lstrip_blocks matter), a newline
# after each turn's eos_token.
ZEPHYR = """\
{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>\\n' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>\\n' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>\\n'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}"""

# Phi-3 style: role tokens built from pieces, and eos_token appended after the last turn
# unless a generation prompt is asked for (text after the last turn).
PHI3 = """\
{% for message in messages %}
{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}
{% endfor %}
{% if add_generation_prompt %}
{{ '<|assistant|>\\n' }}
{% else %}
{{ eos_token }}
{% endif %}"""

CHATS = [
    [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 12+30?"},
        {"role": "assistant", "content": "42"},
        {"role": "user", "content": "And the capital of France?"},
        {"role": "assistant", "content": "Paris. It is also the largest city."},
    ],
    [
        {"role": "user", "content": "Tell me a joke about cats."},
        {"role": "assistant", "content": " Why did the cat sit on the computer?\n"},
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "To keep an eye on the mouse! 😀 café"},
    ],
    [  # an answer equal to the role name, a literal special token in user text, an empty answer
        {"role": "system", "content": "assistant"},
        {"role": "user", "content": "say <|im_end|> and <|eot_id|> please"},
        {"role": "assistant", "content": "assistant"},
        {"role": "user", "content": "nothing now"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "东京 def add(a, b):\n    return a + b"},
        {"role": "assistant", "content": "def add(a, b):\n    return a + b\n\n"},
    ],
]


def train_tokenizer_json(trim_offsets: bool) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=trim_offsets)
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(CORPUS, trainer)
    return tk.to_str()


def added_token(content: str) -> dict:
    return {
        "__type": "AddedToken",
        "content": content,
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": True,
    }


def make_folder(path: Path, json_text: str, config: dict, jinja: str | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "tokenizer.json").write_text(json_text)
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    if jinja is not None:
        (path / "chat_template.jinja").write_text(jinja)
    return path


def strip_generation(template: str) -> str:
    return re.sub(r"\{%-?\s*(end)?generation\s*-?%\}\n?", "", template)


@pytest.fixture(scope="module", params=[False, True], ids=["offsets", "trimmed-offsets"])
def folders(request, tmp_path_factory) -> dict[str, Path]:
    """Tokenizer folders: chatml (generation blocks), llama3 (named templates), zephyr
    (chat_template.jinja beats a stale config template), phi3, plain (no template)."""
    base = tmp_path_factory.mktemp("hf-folders")
    text = train_tokenizer_json(trim_offsets=request.param)
    common = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096}
    return {
        "chatml": make_folder(
            base / "chatml",
            text,
            {
                **common,
                "chat_template": CHATML_GENERATION,
                "bos_token": None,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
            },
        ),
        "llama3": make_folder(
            base / "llama3",
            text,
            {
                **common,
                "bos_token": "<|begin_of_text|>",
                "eos_token": "<|eot_id|>",
                "chat_template": [
                    {"name": "default", "template": LLAMA3},
                    {"name": "tool_use", "template": "{{ raise_exception('no') }}"},
                ],
            },
        ),
        "zephyr": make_folder(
            base / "zephyr",
            text,
            {**common, "eos_token": added_token("</s>"), "chat_template": "stale {{ messages }}"},
            jinja=ZEPHYR,
        ),
        "phi3": make_folder(
            base / "phi3",
            text,
            {**common, "eos_token": "<|endoftext|>", "chat_template": PHI3},
        ),
        "plain": make_folder(base / "plain", text, {**common, "eos_token": "<|endoftext|>"}),
    }


def ours(folder: Path) -> HFTokenizer:
    return HFTokenizer.create(
        HFConfig(path=str(folder / "tokenizer.json")), corpus=lambda: iter(())
    )


def theirs(folder: Path):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(folder))


def masked_runs(tok: HFTokenizer, ids: list[int], mask: list[int]) -> list[str]:
    """The decoded text of each run of consecutive learned tokens."""
    runs, current = [], []
    for token, learned in zip(ids, mask, strict=True):
        if learned:
            current.append(token)
        elif current:
            runs.append(tok.decode(current))
            current = []
    if current:
        runs.append(tok.decode(current))
    return runs


def answers(chat: list[dict], transform=lambda s: s) -> list[str]:
    return [transform(m["content"]) for m in chat if m["role"] == "assistant"]


# ----------------------------------------------------------------------------- reading folders
def test_folder_templates_and_special_tokens_are_read(folders):
    chatml, llama3, zephyr, plain = (
        ours(folders[k]) for k in ("chatml", "llama3", "zephyr", "plain")
    )
    assert chatml.chat_template == CHATML_GENERATION
    assert chatml.chat_tokens == {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    assert llama3.chat_template == LLAMA3  # the "default" of named templates
    assert llama3.chat_tokens["bos_token"] == "<|begin_of_text|>"
    assert zephyr.chat_template == ZEPHYR  # chat_template.jinja wins over the config's
    assert zephyr.chat_tokens["eos_token"] == "</s>"  # from a serialized AddedToken
    assert plain.chat_template is None
    assert template_id(plain) == "builtin"
    assert template_id(chatml) == sha256_text(CHATML_GENERATION)
    assert chatml.describe()["chat_template"] == sha256_text(CHATML_GENERATION)


def test_template_survives_save_and_load(folders, tmp_path):
    tok = ours(folders["llama3"])
    tok.save(tmp_path / "saved")
    again = load_tokenizer(tmp_path / "saved")
    assert again.chat_template == LLAMA3 and again.chat_tokens == tok.chat_tokens
    assert encode_chats(again, CHATS) == encode_chats(tok, CHATS)
    assert again.fingerprint() == tok.fingerprint()  # the vocabulary's identity is unchanged


def test_plain_folder_renders_the_builtin_template(folders):
    tok = ours(folders["plain"])
    ids, mask = encode_chats(tok, CHATS[:1])[0]
    assert tok.decode(ids).startswith("<|system|>You are a terse assistant.<|end|>")
    assert ids[-1] == tok.eos_id
    assert masked_runs(tok, ids, mask) == [a + "<|end|>" for a in answers(CHATS[0])]


# ----------------------------------------------------------------------------- masks (ours alone)
def test_llama3_style_mask_is_each_trimmed_answer_and_its_eot(folders):
    tok = ours(folders["llama3"])
    for (ids, mask), chat in zip(encode_chats(tok, CHATS), CHATS, strict=True):
        assert tok.decode(ids).startswith("<|begin_of_text|><|start_header_id|>")
        assert masked_runs(tok, ids, mask) == answers(chat, lambda s: s.strip() + "<|eot_id|>")


def test_zephyr_style_mask_stops_after_eos_not_at_the_newline(folders):
    tok = ours(folders["zephyr"])
    for (ids, mask), chat in zip(encode_chats(tok, CHATS), CHATS, strict=True):
        text = tok.decode(ids)
        assert text.startswith(f"<|{chat[0]['role']}|>\n") and text.endswith("</s>\n")
        assert masked_runs(tok, ids, mask) == answers(chat, lambda s: s + "</s>")


def test_phi3_style_mask_ignores_text_after_the_last_turn(folders):
    tok = ours(folders["phi3"])
    for (ids, mask), chat in zip(encode_chats(tok, CHATS), CHATS, strict=True):
        assert tok.decode(ids).endswith("<|end|>\n\n<|endoftext|>\n")
        assert masked_runs(tok, ids, mask) == answers(chat, lambda s: s + "<|end|>")


def test_chatml_generation_mask_is_each_answer_and_im_end(folders):
    tok = ours(folders["chatml"])
    for (ids, mask), chat in zip(encode_chats(tok, CHATS), CHATS, strict=True):
        assert masked_runs(tok, ids, mask) == answers(chat, lambda s: s + "<|im_end|>")


def test_template_errors_are_one_line_data_errors(folders):
    tok = ours(folders["llama3"])
    with pytest.raises(ChatTemplateError, match="unknown role tool"):
        encode_chats(tok, [[{"role": "tool", "content": "x"}]])
    # Content rendered twice, or a header depending on it: refused, with the fix named.
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}]
    for template in (
        "{% for m in messages %}{{ m.content }}|{{ m.content }}{% endfor %}",
        "{% for m in messages %}{% if m.content|length > 3 %}long:{% endif %}"
        "{{ m.content }}{% endfor %}",
    ):
        tok.chat_template = template
        with pytest.raises(ChatTemplateError, match="generation"):
            encode_chats(tok, [chat])


def test_render_chat_adds_the_generation_prompt(folders):
    chat = CHATS[0][:2]
    assert render_chat(ours(folders["chatml"]), chat, add_generation_prompt=True).endswith(
        "<|im_start|>assistant\n"
    )
    assert render_chat(ours(folders["plain"]), chat, True).endswith("<|end|><|assistant|>")


# ----------------------------------------------------------------------------- transformers parity
@pytest.mark.parity
@needs_transformers
@pytest.mark.parametrize("name", ["chatml", "llama3", "zephyr", "phi3"])
def test_ids_match_apply_chat_template(folders, name):
    tok, reference = ours(folders[name]), theirs(folders[name])
    for (ids, _), chat in zip(encode_chats(tok, CHATS), CHATS, strict=True):
        expected = reference.apply_chat_template(chat, tokenize=True, return_dict=False)
        assert ids == list(expected)
        assert tok.decode(ids) == reference.apply_chat_template(chat, tokenize=False)


@pytest.mark.parity
@needs_transformers
def test_generation_mask_matches_return_assistant_tokens_mask(folders):
    tok, reference = ours(folders["chatml"]), theirs(folders["chatml"])
    for (ids, mask), chat in zip(encode_chats(tok, CHATS), CHATS, strict=True):
        out = reference.apply_chat_template(
            chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        assert ids == list(out["input_ids"])
        assert mask == list(out["assistant_masks"])
        assert sum(mask) > 0


@pytest.mark.parity
@needs_transformers
def test_prefix_mask_without_generation_blocks_equals_the_generation_mask(folders):
    """The same ChatML template without its generation tags: the prefix method finds the same
    tokens transformers' mask gives for the tagged template."""
    tagged = ours(folders["chatml"])
    untagged = HFTokenizer(
        tagged.json_text,
        chat_template=strip_generation(CHATML_GENERATION),
        chat_tokens=tagged.chat_tokens,
    )
    assert not GENERATION_TAG.search(untagged.chat_template)
    reference = theirs(folders["chatml"])
    for (ids, mask), chat in zip(encode_chats(untagged, CHATS), CHATS, strict=True):
        out = reference.apply_chat_template(
            chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        assert ids == list(out["input_ids"])
        assert mask == list(out["assistant_masks"])


# ----------------------------------------------------------------------------- tokenize jobs
@pytest.mark.parametrize("name", ["chatml", "plain"])
def test_sft_tokenize_job_records_the_template(tmp_path, folders, name):
    meta = tokenize(
        tmp_path,
        "addition",
        "data.num_examples=20",
        "tokenizer.name=hf",
        f"tokenizer.path={folders[name] / 'tokenizer.json'}",
        "data.num_workers=1",
    )
    tok = ours(folders[name])
    expected = sha256_text(CHATML_GENERATION) if name == "chatml" else "builtin"
    assert meta["tokenizer"]["chat_template"] == expected
    dataset = TokenizedDataset(find_dataset(tmp_path, "addition"))
    saved = load_tokenizer(dataset.tokenizer_dir)
    assert template_id(saved) == expected
    tokens, mask = dataset.splits["train"][0].document(0)
    text = tok.decode(tokens)
    learned = masked_runs(tok, list(tokens), list(np.asarray(mask)))
    if name == "chatml":
        assert re.fullmatch(
            r"<\|im_start\|>system\nYou are a helpful assistant\.<\|im_end\|>\n"
            r"<\|im_start\|>user\nWhat is \d+\+\d+\?<\|im_end\|>\n"
            r"<\|im_start\|>assistant\n\d+<\|im_end\|>\n",
            text,
        )
        assert learned == [text.split("assistant\n")[-1].removesuffix("\n")]
    else:
        assert re.fullmatch(
            r"<\|user\|>What is \d+\+\d+\?<\|end\|><\|assistant\|>\d+<\|end\|><\|endoftext\|>",
            text,
        )
        assert learned == [text.split("<|assistant|>")[1].removesuffix("<|endoftext|>")]


# ---------------------------------------------------------------------------- the built-in one
BUILTIN_CHATS = [
    [{"role": "user", "content": "What is 47+38?"}, {"role": "assistant", "content": "85"}],
    [
        {"role": "system", "content": "Add."},
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "é+2?"},
        {"role": "assistant", "content": "no"},
    ],
]


def test_the_builtin_template_in_jinja_renders_and_masks_as_the_builtin_one():
    """What an export writes as ``chat_template``: read by the same tokenizer as a Hugging
    Face folder, its chats are the built-in template's ids and loss masks, and a generation
    prompt is the one ``generate.chat=true`` gives; a role it has no marker for is refused."""
    from theseus.data.tokenizers.byte import ByteTokenizer
    from theseus.data.tokenizers.byte_json import byte_tokenizer_json
    from theseus.data.tokenizers.chat_template import builtin_source

    byte = ByteTokenizer()
    folder = HFTokenizer(byte_tokenizer_json(), chat_template=byte.chat_template_source())
    assert folder.chat_template == builtin_source("<|endoftext|>")
    assert encode_chats(folder, BUILTIN_CHATS) == encode_chats(byte, BUILTIN_CHATS)
    question = BUILTIN_CHATS[0][:1]
    assert folder.chat_prompt(question) == byte.chat_prompt(question)
    assert byte.decode(byte.chat_prompt(question)) == "<|user|>What is 47+38?<|end|><|assistant|>"
    assert byte.chat_stops() == [byte.special_id("<|end|>")] and folder.chat_stops() == []
    with pytest.raises(ChatTemplateError, match="has the roles system, user, assistant, not tool"):
        encode_chats(folder, [[{"role": "tool", "content": "x"}]])
