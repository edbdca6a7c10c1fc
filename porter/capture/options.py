"""What a live capture is asked to do, and the activation keys it writes.

Kept apart from porter.capture.run so the CLI and trace-mode diagnose can build options
without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

OUTPUT_KEY = "<output>"
INPUT_KEY = "<input>"


@dataclass
class CaptureOptions:
    steps: int = 5
    warmup: int = 2
    repeats: int = 20  # timed whole forwards (unprofiled)
    activations: bool = True
    full_modules: tuple[str, ...] = ()  # module paths whose full calls are saved (`--modules`); the rest are sketched
    dtype: str = ""  # run the model cast to this dtype (`--dtype`, porter.capture.precision); "" = as given
    autocast: str = ""  # run the model's forward under torch.autocast to this dtype (`--autocast`); "" = no
