"""One stack's availability per device, printed as JSON lines: run as
``python -m porter.targets.probe STACK`` by porter.pipeline.probe, one process per stack, so a
stack whose import or device query hangs or crashes costs its own row, not the table."""

from __future__ import annotations

import json
import sys

from porter.targets import AUTO_DEVICE, StackMissing, TargetSpec, get_stack


def probe(name: str) -> list[dict[str, object]]:
    """Each device the stack claims (one row when its module will not import), with its availability."""
    stack = get_stack(name)
    devices = (AUTO_DEVICE,) if isinstance(stack, StackMissing) else stack.devices
    rows = []
    for device in devices:
        a = stack.availability(device)
        rows.append({"target": TargetSpec(device, name).text, "ok": a.ok, "reason": a.reason, "remedy": a.remedy})
    return rows


def main(argv: list[str]) -> int:
    for row in probe(argv[0]):
        sys.stdout.write(json.dumps(row) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
