"""theseus.models: model families built from shared layers, with Hugging Face interop.

* ``layers/``: attention, MLPs, norms, RoPE, the mixture of experts, the block and the
  decoder (``DecoderLM``) every family builds on
* ``gpt/``, ``llama/``, ``qwen2/``, ``qwen3/``, ``qwen3_moe/``: one folder per family
  (``config.py``, ``model.py``, ``hf.py``; ``__init__`` holds its ``Family``)
* ``hf/``: import and export transformers checkpoints through the families' ``hf.py``
* ``generate.py``, ``generate_job.py``: KV-cache generation and the ``<model>/generate`` jobs
* ``hf_jobs.py``: the ``hf/import`` and ``hf/export`` jobs; ``runs.py``: a training run's
  model at a step and its tokenizer, read without its data
* ``plugin.py``: the list of families and the hooks registering them with theseus
"""
