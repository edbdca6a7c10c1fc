"""The XSpace format's name and plane-name prefixes, below both profilers/xplane.py (which
sniffs) and the reader it imports on first use (profilers/xplane_read.py): the reader needs
them too, and importing them from its own importer made a circle."""

FORMAT = "xplane"
PLANE_NAMES = (b"/host:", b"/device:", b"/custom:", b"Task Environment")
