"""Storage: a bundle on disk (manifest + Parquet tables + raw/ + activations/) and
``ingest`` (a recorded trace -> a bundle). Never imports a model stack.
"""
