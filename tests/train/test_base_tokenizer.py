"""Fine-tuning from a run tokenizes its data with that run's own tokenizer (issue 35 item 6):
a trained BPE by its file, a byte tokenizer, an ``hf`` tokenizer.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from theseus.data.tokenizers import find_tokenizer
from theseus.data.tokenizers.byte_json import byte_tokenizer_json

from tests.train.conftest import TINY, run_cli

SAMPLE = "What is 47+38? 85\n<|user|>def f(x):\n    return x  # é"


def data_folder(root: Path, run: str) -> Path:
    record = json.loads((root / "runs" / run / "data-identity.json").read_text())
    return root / record["datasets"][0]["path"]


@pytest.mark.parametrize("kind", ["bpe", "byte", "hf"])
def test_sft_data_is_tokenized_by_the_base_runs_tokenizer(tmp_path: Path, kind: str):
    tokenizer = [f"data.tokenizer={kind}"]
    if kind == "hf":
        (tmp_path / "tok").mkdir()
        (tmp_path / "tok" / "tokenizer.json").write_text(byte_tokenizer_json())
        tokenizer.append(f"data.tokenizer_options={{path: {tmp_path / 'tok' / 'tokenizer.json'}}}")
    base = [*TINY, *tokenizer, "training.total_steps=1", "eval.every=0"]
    done = run_cli(tmp_path, "run", "gpt/train/pretrain", *base, "--name", "base")
    assert done.returncode == 0, done.stderr[-3000:]
    sft = ["model.max_seq_len=64", "training.seq_len=32", "training.global_batch_size=4"]
    sft += ["training.total_steps=2", "eval.every=0", "logging.progress=false"]
    done = run_cli(
        tmp_path,
        "run",
        "gpt/train/sft",
        "init.checkpoint=base",
        "lora.rank=4",
        *sft,
        "--name",
        "sft",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = find_tokenizer(data_folder(tmp_path, "base") / "tokenizer")
    ours = find_tokenizer(data_folder(tmp_path, "sft") / "tokenizer")
    assert theirs is not None and ours is not None
    assert ours.vocab_size == theirs.vocab_size
    for token in range(theirs.vocab_size):  # every id means the same string
        assert ours.decode([token]) == theirs.decode([token]), token
    assert ours.encode(SAMPLE) == theirs.encode(SAMPLE)
    assert theirs.decode(ours.encode(SAMPLE)) == SAMPLE
