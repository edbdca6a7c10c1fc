"""porter: performance-portability diagnosis across accelerators."""

__version__ = "0.1.0"
