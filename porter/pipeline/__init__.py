"""Orchestration: ``inputs`` (a --from/--to spec -> a bundle), ``diagnose`` (bundles in, a
diagnosis out). Imported by the CLI and by Python callers; imports every layer below it.
"""
