"""Workarounds for released third-party packages that do not yet match our torch.

Each module here holds exactly one workaround and removes itself from the path once
the upstream fix is installed (it always tries the plain import first)."""
