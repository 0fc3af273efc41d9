"""A step's plan before it runs: the dry run, its report, the compiled program's statistics
(HLO collectives, FLOPs), the step-time estimate and the advice when a step does not fit.
Reads the training setup (``theseus.core.train``); the trainer never imports this folder."""
