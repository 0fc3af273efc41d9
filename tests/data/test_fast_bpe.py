"""The tiktoken encoder of byte-level BPEs: the same ids as Hugging Face tokenizers, on the
embedded corpus and on text chosen to break it; refused where the structure differs."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
from theseus.data.datasets.stdlib import stdlib_files
from theseus.data.tokenize.units import encode_records
from theseus.data.tokenizers.base import SPECIAL_TOKENS
from theseus.data.tokenizers.fast_bpe import tiktoken_equivalent
from theseus.data.tokenizers.huggingface import BPETokenizer, HFTokenizer


def stdlib_texts(limit: int) -> list[str]:
    texts, used = [], 0
    for path in stdlib_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        used += len(text)
        if used >= limit:
            break
    return texts


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return stdlib_texts(1_500_000)


@pytest.fixture(scope="module")
def bpe(corpus) -> BPETokenizer:
    config = SimpleNamespace(vocab_size=4096, min_frequency=2, train_bytes=1_000_000)
    return BPETokenizer.create(config, lambda: iter(corpus))


def reference(tokenizer: HFTokenizer, texts: list[str]) -> list[list[int]]:
    """What Hugging Face tokenizers gives (added tokens in the text matched, as always)."""
    return [e.ids for e in tokenizer.tk.encode_batch(texts, add_special_tokens=False)]


SCRIPTS = [
    (0x20, 0x7E),  # ASCII
    (0xA0, 0x24F),  # Latin-1 and extended Latin, with combining-free accents
    (0x300, 0x36F),  # combining marks
    (0x370, 0x3FF),  # Greek
    (0x400, 0x4FF),  # Cyrillic
    (0x590, 0x6FF),  # Hebrew, Arabic (with Arabic-Indic digits)
    (0x900, 0x97F),  # Devanagari
    (0xE00, 0xE7F),  # Thai
    (0x2000, 0x206F),  # general punctuation: odd spaces, joiners, bidi marks
    (0x3000, 0x30FF),  # CJK punctuation, kana
    (0x4E00, 0x4FFF),  # CJK ideographs
    (0xFF00, 0xFFEF),  # fullwidth forms (fullwidth digits)
    (0x1D400, 0x1D7FF),  # mathematical letters and digits
    (0x1F300, 0x1FAFF),  # emoji
]


def adversarial() -> list[str]:
    rng = random.Random(0)
    texts = [" " * n + "x" + " " * n for n in (1, 2, 3, 7, 16, 64, 300)] + [
        "\t\t  \n\n \r\n" * 20,
        "a" * 5000,
        "1234567890" * 50 + " 3.14159 -42 1e-9 0x1F 1_000_000 ٣٤٥ ١٢٣ １２３ ²³",
        "It's they'll we'RE I'M you've he'd DON'T 's 't",
        "👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 e\u0301 \u200b\u200d\ufeff \u202e backwards \u202c",
        "def f(x):\n\treturn x  # héllo — “quotes” ‘single’ … 日本語のテキスト 中文 한국어",
        "<|endoftext|>",
        "text<|endoftext|>more<|user|>hi<|end|><|assistant|>ok<|end|>",
        "<|end <|endoftext <|pad|> <|pad|><|pad|>|> <||> <|system|>\n<|system|> ",
        "partial <|endoftex and <|end|x and |>< and <|<|endoftext|>|>",
    ]
    for _ in range(300):  # random strings over many scripts, spaces and specials
        parts = []
        for _ in range(rng.randint(1, 40)):
            roll = rng.random()
            if roll < 0.1:
                parts.append(" " * rng.randint(1, 12))
            elif roll < 0.15:
                parts.append(rng.choice(SPECIAL_TOKENS))
            elif roll < 0.2:
                parts.append(str(rng.randint(0, 10**12)))
            else:
                lo, hi = rng.choice(SCRIPTS)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
        texts.append("".join(parts))
    return texts


def test_bpe_is_encoded_by_tiktoken_with_identical_ids(bpe, corpus):
    assert bpe.fast_encoder is not None  # the trained BPE takes the fast path
    texts = corpus + adversarial()
    assert bpe.encode_batch(texts) == reference(bpe, texts)
    arrays = bpe.encode_arrays(texts[:50])
    assert [a.tolist() for a in arrays] == reference(bpe, texts[:50])
    special = bpe.encode("a<|endoftext|>b")
    assert bpe.eos_id in special  # written special tokens are matched, as tokenizers does


def test_the_tokenize_workers_write_the_same_tokens(bpe, corpus):
    tokens, lengths, mask = encode_records(bpe, "text", corpus[:20])
    expected = [ids + [bpe.eos_id] for ids in reference(bpe, corpus[:20])]
    assert lengths.tolist() == [len(ids) for ids in expected] and mask is None
    np.testing.assert_array_equal(tokens, np.concatenate([np.array(e) for e in expected]))


def test_a_gpt2_style_tokenizer_json_from_elsewhere_takes_the_fast_path(bpe):
    """An ``hf`` tokenizer of the same structure (as GPT-2's is) is encoded by tiktoken."""
    hf = HFTokenizer(bpe.json_text)
    assert hf.fast_encoder is not None
    texts = adversarial()[:60]
    assert hf.encode_batch(texts) == reference(hf, texts)


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda d: d.update(normalizer={"type": "NFC"}), "it has a normalizer"),
        (lambda d: d["pre_tokenizer"].update(add_prefix_space=True), "adds a prefix space"),
        (lambda d: d["model"].update(dropout=0.1), "sets dropout"),
        (lambda d: d["added_tokens"][0].update(lstrip=True), "strips or matches whole words"),
        (lambda d: d["model"]["merges"].reverse(), "increasing id order"),
    ],
)
def test_other_structures_keep_tokenizers_and_say_why(bpe, change, reason):
    data = json.loads(bpe.json_text)
    change(data)
    encoding, why = tiktoken_equivalent(json.dumps(data))
    assert encoding is None and reason in why
