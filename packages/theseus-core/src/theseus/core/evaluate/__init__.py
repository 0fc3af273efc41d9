"""Evaluations: perplexity and bits-per-byte, multiple choice, generation with exact match.

Evaluations are components of the ``evaluations`` registry (hook
``theseus_register_evaluations``): a config dataclass plus ``target``, a function
``run(config, target) -> dict[str, float]`` where ``target`` is an
:class:`theseus.core.evaluate.target.EvalTarget` (a model, its tokenizer, its data).
Importing this package is cheap: JAX loads in the submodules that score.
"""
