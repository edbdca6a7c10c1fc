"""Accuracy on live pairs: ``live`` (sketch comparison, shadow runs of each module's recorded
call, suspects' full tensors), ``replay`` (op-level replay inside a module that introduces
error), ``precision`` (precision ports against float64). The pure metrics and verdicts stay in
``porter.analysis.accuracy``.
"""
