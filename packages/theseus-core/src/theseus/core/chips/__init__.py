"""The chips users train on, and compiling for them from any machine.

``specs``: each chip's published numbers (memory, peak FLOP/s, bandwidths); ``targets``: names
as users say them (``v5p-8``, ``v6e-16``, ``h100x8``) -> a chip, a device count and a topology;
``devices``: compile-only devices of a target (libtpu and the CUDA plugin, the ``aot`` extra);
``gpu_config``: the GPU target description XLA:GPU compiles against; ``environment``: a plain
CPU start when those compilers are installed on a machine without accelerators.
Nothing here imports JAX at module level.
"""
