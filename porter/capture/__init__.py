"""Capture layer: run a model on a stack under that stack's own profiler, into a bundle.

Holds the capture workflow (``run.py``), what it is asked to do (``options.py``, no torch),
unprofiled timing (``timing.py``) and the model specs (``models/``). The stacks themselves
live in ``porter.targets`` (one file each), which this layer drives.

May import: porter.targets, porter.bundles.bundle, porter.core.schema, porter.core.errors. Never the analysis,
the reports or the CLI. This file imports nothing, so ``porter.capture.options`` stays
torch-free.
"""
