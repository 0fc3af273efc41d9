"""Training recipes: the jobs that compose the training machinery (``theseus.core.train``)
with data, evaluations and an objective: pretraining, SFT and preference optimisation."""
