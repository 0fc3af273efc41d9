"""Preference data: pairs tokenized as two chat documents, kept together, read as pairs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from datatest_helpers import data_config, tokenize
from theseus.core.data import DataError, TokenizedDataset, open_training_data
from theseus.core.data.api import dataset_path, find_dataset
from theseus.core.data.batch_plan import BatchPlan
from theseus.data import load_tokenizer
from theseus.data.datasets.preference import (
    AdditionPreference,
    AdditionPreferenceConfig,
    carry_dropped,
)
from theseus.data.errors import BadRecordError
from theseus.data.tokenize.publish import validation_documents

PAIRS = 40  # records kept (data.max_documents) of the 60 generated
FRACTION = 0.25
END = "<|end|>"
BYTE = ("tokenizer.name=byte", "data.num_workers=1")


def additions() -> list[dict[str, str]]:
    config = AdditionPreferenceConfig(num_examples=60, max_documents=PAIRS)
    return list(AdditionPreference(config).records())


def open_pairs(root, data, **kw):
    args = {"seq_len": 40, "batch": 8, "seed": 3, "layout": "pairs", **kw}
    return open_training_data(root, data, **args)


def documents(dataset: TokenizedDataset, split: str) -> list[tuple[np.ndarray, np.ndarray]]:
    return [
        (np.asarray(tokens), np.asarray(mask))
        for shard in dataset.splits[split]
        for tokens, mask in (shard.document(i) for i in range(len(shard.doc_starts)))
    ]


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """addition-preference (40 pairs, several work units) and addition, byte tokenizer."""
    root = tmp_path_factory.mktemp("preference-root")
    tokenize(
        root,
        "addition-preference",
        *BYTE,
        "data.num_examples=60",
        f"data.max_documents={PAIRS}",
        f"data.validation_fraction={FRACTION}",
        "data.unit_bytes=200",
    )
    tokenize(root, "addition", *BYTE, "data.num_examples=20", name="sft")
    return root


@pytest.fixture(scope="module")
def pairs_data():
    return data_config(
        dataset="addition-preference",
        tokenizer="byte",
        max_documents=PAIRS,
        validation_fraction=FRACTION,
        dataset_options={"num_examples": 60},
    )


def test_addition_pairs_are_right_and_plausibly_wrong_sums():
    records = additions()
    assert len(records) == PAIRS and records == additions()  # deterministic
    for record in records:
        a, b = map(int, record["prompt"].removeprefix("What is ").rstrip("?").split("+"))
        assert record["chosen"] == str(a + b)  # the SFT set's answer format
        wrong = int(record["rejected"])
        assert wrong != a + b and record["rejected"] == str(wrong)
        slip = [int(x) - int(y) for x, y in zip(f"{wrong:0>9}", f"{a + b:0>9}", strict=True)]
        assert wrong == carry_dropped(a, b) or sorted(map(abs, slip))[-2:] == [0, 1]


def test_each_pair_is_two_documents_learning_only_the_answers(root):
    dataset = TokenizedDataset(find_dataset(root, "addition-preference"))
    meta = dataset.metadata
    assert meta["kind"] == "preference" and dataset.holds_pairs
    assert meta["documents"] == 2 * PAIRS
    tokenizer = load_tokenizer(dataset.tokenizer_dir)
    held = validation_documents(PAIRS, FRACTION)  # drawn per record, not per document
    records = additions()
    for split, keep in (("train", ~held), ("validation", held)):
        expected = [r for r, k in zip(records, keep, strict=True) if k]
        docs = documents(dataset, split)
        assert meta["splits"][split]["documents"] == len(docs) == 2 * len(expected)
        for p, record in enumerate(expected):
            (chosen, chosen_mask), (rejected, rejected_mask) = docs[2 * p], docs[2 * p + 1]
            assert tokenizer.decode(chosen[chosen_mask == 1]) == record["chosen"] + END
            assert tokenizer.decode(rejected[rejected_mask == 1]) == record["rejected"] + END
            prompt = chosen[: np.argmax(chosen_mask)]
            np.testing.assert_array_equal(rejected[: len(prompt)], prompt)
            assert record["prompt"] in tokenizer.decode(prompt)


def test_max_tokens_keeps_whole_pairs(tmp_path):
    meta = tokenize(
        tmp_path, "addition-preference", *BYTE, "data.num_examples=20", "data.max_tokens=100"
    )
    assert meta["documents"] % 2 == 0 and 0 < meta["documents"] < 40
    for split in meta["splits"].values():
        assert split["documents"] % 2 == 0


@pytest.mark.parametrize("side", ["right", "left"])
def test_pairs_layout_rows_chosen_then_rejected(root, pairs_data, side):
    pairs_data = data_config(**{**pairs_data.__dict__, "padding_side": side})
    data = open_pairs(root, pairs_data)
    tokenizer = load_tokenizer(data.tokenizer_dir)
    batch = data.batch(0)
    assert batch["inputs"].shape == (8, 40)
    for p in range(4):
        texts, prefixes = [], []
        for row in (2 * p, 2 * p + 1):
            real = batch["segment_ids"][row] == 1
            assert real[-1 if side == "left" else 0]
            assert (batch["inputs"][row][~real] == data.pad_id).all()
            assert batch["positions"][row][real].tolist() == list(range(int(real.sum())))
            learned = batch["loss_mask"][row] == 1
            texts.append(tokenizer.decode(batch["targets"][row][learned]))
            first = int(np.argmax(learned))  # the prompt: inputs up to the first learned target
            prefixes.append(batch["inputs"][row][np.flatnonzero(real)[0] : first + 1])
        np.testing.assert_array_equal(prefixes[0], prefixes[1])
        a, b = tokenizer.decode(prefixes[0]).split("What is ")[1].split("?")[0].split("+")
        assert texts[0] == f"{int(a) + int(b)}{END}"
        assert texts[1] != texts[0] and texts[1].endswith(END)


def test_pairs_are_a_pure_function_of_seed_and_step(root, pairs_data):
    data = open_pairs(root, pairs_data)
    assert_same(data.batch(5), open_pairs(root, pairs_data).batch(5))
    assert not np.array_equal(data.batch(5)["inputs"], data.batch(6)["inputs"])
    other_seed = open_pairs(root, pairs_data, seed=4).batch(5)
    assert not np.array_equal(data.batch(5)["inputs"], other_seed["inputs"])
    for count in (2, 4):
        hosts = [
            open_pairs(
                root,
                pairs_data,
                process_index=i,
                batch=BatchPlan.of(8, processes=count, pairs=True),
            )
            for i in range(count)
        ]
        for step in (0, 7):
            joined = [h.batch(step) for h in hosts]
            assert_same(
                {k: np.concatenate([j[k] for j in joined]) for k in joined[0]}, data.batch(step)
            )
        valid = [h.validation_batches(2) for h in hosts]
        for index, whole in enumerate(data.validation_batches(2)):
            parts = [v[index] for v in valid]
            assert_same({k: np.concatenate([p[k] for p in parts]) for k in whole}, whole)


def test_an_epoch_visits_every_pair_once(root, pairs_data):
    data = open_pairs(root, pairs_data, batch=2)
    pairs = data._train[0].known()
    seen = [
        item
        for step in range(pairs)
        for _, item in data._picks(step, data.mixture, data._train, True)
    ]
    assert sorted(seen) == list(range(pairs))


def test_batch_sizes_that_split_a_pair_are_refused(root, pairs_data):
    with pytest.raises(DataError, match=r"^global batch size 7 is odd: the pairs layout"):
        open_pairs(root, pairs_data, batch=BatchPlan.of(7, pairs=True))
    with pytest.raises(DataError, match="processes 3 rows: the pairs layout needs an even"):
        open_pairs(root, pairs_data, batch=BatchPlan.of(6, processes=2, pairs=True))


def test_layouts_refuse_the_other_kind_in_one_line(root, pairs_data):
    sft = data_config(dataset="addition", tokenizer="byte", dataset_options={"num_examples": 20})
    with pytest.raises(DataError, match="dataset 'addition' .* not preference pairs") as error:
        open_pairs(root, sft)
    assert "\n" not in str(error.value)
    for layout in ("padded", "packed"):
        with pytest.raises(DataError, match="'addition-preference' .* holds preference pairs"):
            open_pairs(root, pairs_data, layout=layout)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def check_jsonl_pairs(root, data, expected):
    """Every document pair of both splits learns exactly its (chosen, rejected) answers."""
    dataset = TokenizedDataset(dataset_path(root, data))
    assert dataset.holds_pairs and dataset.metadata["documents"] == 2 * len(expected)
    tokenizer = load_tokenizer(dataset.tokenizer_dir)
    found = []
    for split in ("train", "validation"):
        docs = documents(dataset, split)
        for p in range(len(docs) // 2):
            (c, cm), (r, rm) = docs[2 * p], docs[2 * p + 1]
            found.append((tokenizer.decode(c[cm == 1]), tokenizer.decode(r[rm == 1])))
    assert sorted(found) == sorted((c + END, r + END) for c, r in expected)
    batch = open_pairs(root, data, batch=4, seq_len=96).batch(0)
    for row in range(4):
        text = tokenizer.decode(batch["targets"][row][batch["loss_mask"][row] == 1])
        assert text in {pair[row % 2] + END for pair in expected}


def test_jsonl_of_string_pairs(tmp_path):
    rows = [
        {"prompt": f"Name a colour, {i}.", "chosen": f"Blue {i}.", "rejected": f"Seven {i}."}
        for i in range(6)
    ]
    files = write_jsonl(tmp_path / "pairs.jsonl", rows)
    tokenize(tmp_path, "preference-jsonl", *BYTE, f"data.files={files}", "data.suffix=str")
    data = data_config(dataset="preference-jsonl", tokenizer="byte", files=str(files), suffix="str")
    check_jsonl_pairs(tmp_path, data, [(r["chosen"], r["rejected"]) for r in rows])


def test_jsonl_of_chat_pairs(tmp_path):
    def turn(role, content):
        return {"role": role, "content": content}

    history = [turn("system", "Be brief."), turn("user", "Hi"), turn("assistant", "Hello!")]
    rows = [
        {  # multi-turn prompt: its assistant turn is context, not learned
            "prompt": [*history, turn("user", "2+2?")],
            "chosen": [turn("assistant", "4")],
            "rejected": [turn("assistant", "5")],
        },
        {  # implicit prompt: chosen and rejected are whole conversations
            "chosen": [turn("user", "Capital of France?"), turn("assistant", "Paris")],
            "rejected": [turn("user", "Capital of France?"), turn("assistant", "Lyon")],
        },
        {"prompt": "Say yes.", "chosen": [turn("assistant", "yes")], "rejected": "no"},
    ]
    files = write_jsonl(tmp_path / "chats.jsonl", rows)
    tokenize(tmp_path, "preference-jsonl", *BYTE, f"data.files={files}", "data.suffix=chat")
    data = data_config(
        dataset="preference-jsonl", tokenizer="byte", files=str(files), suffix="chat"
    )
    check_jsonl_pairs(tmp_path, data, [("4", "5"), ("Paris", "Lyon"), ("yes", "no")])


def test_malformed_pair_names_its_line(tmp_path):
    rows = [
        {"prompt": "ok", "chosen": "a", "rejected": "b"},
        {
            "prompt": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            "chosen": "x",
            "rejected": "y",
        },
    ]
    files = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(BadRecordError, match=r"bad.jsonl:2: 'prompt' ends with a 'assistant' turn"):
        tokenize(tmp_path, "preference-jsonl", *BYTE, f"data.files={files}")
