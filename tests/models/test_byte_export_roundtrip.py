"""The README's export of a byte-tokenizer run comes back (issue 35 item 7): the folder holds a
``tokenizer.json`` giving the byte tokenizer's ids, ``hf/import`` accepts it and
``transformers`` loads the model and the tokenizer. The folder carries the run's chat
template: ``apply_chat_template`` gives the ids chat data trained on and the ids
``gpt/generate generate.chat=true`` prompts with, and the run imported back renders chats
with it exactly as the built-in template did."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from theseus.data.tokenizers.byte import ByteTokenizer
from theseus.data.tokenizers.chat_template import encode_chats
from theseus.data.tokenizers.load import find_tokenizer

from tests.models.conftest import needs_parity
from tests.train.conftest import TINY, final_params, run_cli

TEXT = "What is 47+38? 85 é"
QUESTION = [{"role": "user", "content": "What is 47+38?"}]
CHAT = [*QUESTION, {"role": "assistant", "content": "85"}]


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

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    byte = ByteTokenizer()
    assert tokenizer(TEXT)["input_ids"] == byte.encode(TEXT)
    assert tokenizer.eos_token_id == byte.eos_id
    assert model.config.vocab_size == byte.vocab_size

    # the chat template the run's chat data was rendered with, as transformers applies it
    assert "chat_template" in json.loads((folder / "tokenizer_config.json").read_text())
    trained_ids, trained_mask = encode_chats(byte, [CHAT])[0]
    assert (
        tokenizer.apply_chat_template(CHAT, tokenize=True, return_dict=True)["input_ids"]
        == trained_ids
    )
    prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, return_dict=True)
    assert (
        prompt["input_ids"]
        == trained_ids[: trained_ids.index(byte.special_id("<|assistant|>")) + 1]
    )
    # a chat through transformers ends where the run's chat data ends an answer: at the
    # template's <|end|>, not only at end-of-document (which the model need not emit after
    # it). With <|end|> made the greedy choice, generation stops after one token.
    end = byte.special_id("<|end|>")
    stops = model.generation_config.eos_token_id
    assert set(stops if isinstance(stops, list) else [stops]) == {byte.eos_id, end}
    asking = torch.tensor([prompt["input_ids"]])
    answer = model.generate(asking, max_new_tokens=4, do_sample=False, sequence_bias={(end,): 1e4})
    assert answer[0, asking.shape[1] :].tolist() == [end]

    # the run imported back renders chats with that template, to the same ids and loss mask
    imported = find_tokenizer(tmp_path / "runs" / "back" / "tokenizer")
    assert imported.chat_template and encode_chats(imported, [CHAT])[0] == (
        trained_ids,
        trained_mask,
    )

    # generate's chat mode prompts with the same ids, and prints each answer once
    asked = ["generate.run=base", "generate.chat=true", f"generate.prompts=[{QUESTION[0]['content']!r}]",
             "generate.max_new_tokens=4", "--name", "ask"]  # fmt: skip
    done = run_cli(tmp_path, "run", "gpt/generate", *asked)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = [
        json.loads(line) for line in (tmp_path / "runs" / "ask" / "generations.jsonl").open()
    ]
    assert record["prompt_ids"] == prompt["input_ids"]
    printed = (done.stdout + done.stderr).count(f"What is 47+38? -> {record['text']}")
    assert printed == 1, (done.stdout, done.stderr)
