"""How a process runs a model for measurement, shared by the stacks (``porter.targets``), the
capture workflow and the benchmark: ``threads`` (one intra-op thread for torch and XLA:CPU),
``allocator`` (freed memory kept in the process, as a caching allocator does), ``timing`` (the
two-clock timer and its samples), ``policy`` (the three together with the clock and warm-up:
the one measurement policy every command enters and records).

Imports nothing of porter above ``porter.core``; the stacks themselves import it lazily.
"""
