"""theseus core: plugins, strict typed configs, jobs and the trainer.

Importing this package is cheap: nothing here imports JAX until a job runs.
"""

from theseus.core.errors import TheseusError

__all__ = ["TheseusError"]
