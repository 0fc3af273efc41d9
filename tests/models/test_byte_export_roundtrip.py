"""The README's export of a byte-tokenizer run comes back (issue 35 item 7): the folder holds a
``tokenizer.json`` giving the byte tokenizer's ids, ``hf/import`` accepts it and
``transformers`` loads the model and the tokenizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from theseus.data.tokenizers.byte import ByteTokenizer

from tests.models.conftest import needs_parity
from tests.train.conftest import TINY, final_params, run_cli

TEXT = "What is 47+38? 85 é"


@needs_parity
def test_a_byte_run_exports_imports_back_and_loads_in_transformers(tmp_path: Path):
    base = [*TINY, "data.tokenizer=byte", "training.total_steps=1", "eval.every=0"]
    done = run_cli(tmp_path, "run", "gpt/train/pretrain", *base, "--name", "base")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "base-hf"
    done = run_cli(tmp_path, "run", "hf/export", "hf.run=base", f"hf.dir={folder}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / "tokenizer.json").is_file()
    done = run_cli(tmp_path, "run", "hf/import", f"hf.dir={folder}", "--name", "back")
    assert done.returncode == 0, done.stderr[-3000:]
    before, after = final_params(tmp_path, "base"), final_params(tmp_path, "back")
    assert before.keys() == after.keys()
    for key in before:
        np.testing.assert_array_equal(before[key], after[key], err_msg=key)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    byte = ByteTokenizer()
    assert tokenizer(TEXT)["input_ids"] == byte.encode(TEXT)
    assert tokenizer.eos_token_id == byte.eos_id
    assert model.config.vocab_size == byte.vocab_size
