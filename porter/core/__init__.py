"""The foundation every layer stands on: the common schema and its columns, the op-class
taxonomy, the one user-error type, units, staged writes, timing statistics, the module-tag
protocol (``tags``) and the stack vocabulary (``stacks``).

Imports nothing above itself and never a model stack (torch, jax, torchax, onnxruntime), so
readers, analysis and reports can all stand on it.
"""
