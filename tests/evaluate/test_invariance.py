"""Scores do not depend on the batch size nor on the padding side (the key correctness test).

Each sequence is scored alone (padding has segment id 0 and its own positions), so the
only differences allowed are float rounding from differently shaped matmuls: decisions
(accuracies, token counts) are identical and log-likelihoods agree to ~1e-7 relative.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from theseus.core.evaluate import choice, perplexity
from theseus.core.evaluate.configs import PerplexityConfig, choice_config
from theseus.core.evaluate.sources import examples

VARIANTS = [(1, "right"), (3, "left"), (3, "right"), (8, "left"), (8, "right")]


def variant(target, batch_size, side):
    return dataclasses.replace(target, batch_size=batch_size, padding_side=side, _scorer=None)


@pytest.fixture(scope="module")
def questions(bench_files):
    config = choice_config("", "", "")(files=str(bench_files["hellaswag"]))
    return [choice.hellaswag_question(r) for r in examples("hellaswag", config)]


def requests(target, questions):
    encode = target.tokenizer.encode
    return [(encode(q.context), encode(c)) for q in questions for c in q.choices]


def test_log_likelihoods_and_accuracy_do_not_depend_on_batch_size_or_padding(opened, questions):
    reference = variant(opened, 8, "right")
    wanted = np.array([r[0] for r in reference.scorer.loglikelihood(requests(opened, questions))])
    widths = {len(a) + len(b) for a, b in requests(opened, questions)}
    assert max(widths) - min(widths) > 8  # rows really are padded, and by different amounts
    accuracy = choice.score(questions, reference)
    for batch_size, side in VARIANTS:
        target = variant(opened, batch_size, side)
        got = np.array([r[0] for r in target.scorer.loglikelihood(requests(opened, questions))])
        np.testing.assert_allclose(got, wanted, rtol=1e-6, err_msg=f"{batch_size} {side}")
        assert choice.score(questions, target) == accuracy


def test_a_sequence_scores_the_same_alone_and_beside_longer_ones(opened, questions):
    target = variant(opened, 4, "left")
    batch = requests(opened, questions)[:4]
    together = target.scorer.loglikelihood(batch)
    alone = [variant(opened, 1, "right").scorer.loglikelihood([r])[0] for r in batch]
    for a, b in zip(together, alone, strict=True):
        assert a[1:] == b[1:] and a[0] == pytest.approx(b[0], rel=1e-6)


def test_val_ppl_does_not_depend_on_batch_size(opened):
    config = PerplexityConfig(rows=10)
    results = [perplexity.run(config, variant(opened, b, "right")) for b in (1, 3, 8)]
    for other in results[1:]:
        assert other["tokens"] == results[0]["tokens"] == 10 * 32
        assert other["bytes"] == results[0]["bytes"]
        assert other["loss"] == pytest.approx(results[0]["loss"], rel=1e-6)
        assert other["bits_per_byte"] == pytest.approx(results[0]["bits_per_byte"], rel=1e-6)


def test_val_ppl_of_imported_weights_needs_a_dataset(opened):
    from theseus.core.evaluate.errors import EvaluationError

    with pytest.raises(EvaluationError, match="needs evaluate.options.val-ppl.dataset"):
        perplexity.run(PerplexityConfig(), dataclasses.replace(opened, data=None))
