"""porter.capture.quiet: what third-party code prints on descriptor 2 or warns goes to the
bundle's log; porter's own stderr writes still reach the terminal."""

from __future__ import annotations

import os
import sys
import warnings

from porter.capture.quiet import LOG, third_party_output


def test_native_lines_and_warnings_go_to_the_log_and_porter_lines_do_not(capfd, tmp_path):
    with third_party_output() as log:
        os.write(2, b"USDT: profiler_start\n")  # what Kineto's C++ does
        warnings.warn("Explicitly requested dtype int64 is not available", UserWarning)
        print("porter: profiling 3 steps", file=sys.stderr)  # porter's progress (rich writes to sys.stderr)
    out = capfd.readouterr()
    assert "USDT" not in out.err and "int64" not in out.err
    assert "porter: profiling 3 steps" in out.err
    assert "USDT: profiler_start" in log.text and "UserWarning: Explicitly requested dtype int64" in log.text
    log.save(tmp_path)
    assert (tmp_path / LOG).read_text() == log.text
    os.write(2, b"after\n")  # descriptor 2 is back
    assert "after" in capfd.readouterr().err


def test_nothing_printed_writes_no_log(tmp_path):
    with third_party_output() as log:
        pass
    log.save(tmp_path)
    assert log.text == "" and not (tmp_path / LOG).exists()
