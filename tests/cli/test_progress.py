"""The diagnose progress bar: a rich bar over the stages on a terminal (the pipe case, one
plain line per stage, is checked on the real CLI in tests/e2e/test_imports.py)."""

from __future__ import annotations

import io

from rich.console import Console

from porter.cli import console as cli


def test_terminal_bar_runs_through_the_stages(monkeypatch) -> None:
    screen = io.StringIO()
    monkeypatch.setattr(cli.err, "_console", Console(file=screen, force_terminal=True, width=100))
    with cli.stage_progress("diagnosing", cli.DIAGNOSE_STAGES) as progress:
        for msg in ("reading source: a.json.gz", "aligning and attributing", "source cpu: timing 10 forwards",
                    "writing diagnosis.json and the two bundles", "writing reports"):
            progress(msg)
    text = screen.getvalue()
    assert "\x1b[" in text and "4/4" in text  # drawn with control codes, ends complete (then erased)
    assert "porter: " not in text  # no plain lines on a terminal


def test_stage_of_names_the_bar_position() -> None:
    assert [cli.stage_of(m, cli.DIAGNOSE_STAGES) for m in
            ("reading target: b.json.gz", "aligning and attributing", "source cpu: timing 10 forwards",
             "writing diagnosis.json and the two bundles", "writing reports")] == [0, 1, None, 2, 3]


def test_terminal_bar_has_a_row_per_trace_read(monkeypatch) -> None:
    """While diagnose reads, each big trace gets its own row (MiB decompressed of MiB); the
    reporter is unset when the bar ends, so later reads draw nothing."""
    from pathlib import Path

    from profilers import progress as hook

    screen = io.StringIO()
    monkeypatch.setattr(cli.err, "_console", Console(file=screen, force_terminal=True, width=120))
    with cli.stage_progress("diagnosing", cli.DIAGNOSE_STAGES):
        reporter = hook.current_reporter()
        assert reporter is not None
        for done in (0, 3 << 20, 8 << 20):
            reporter(Path("/t/h100.json.gz"), done, 8 << 20)
            reporter(Path("/t/[b]mi300x.json.gz"), done // 2, 8 << 20)
    text = screen.getvalue()
    assert "reading h100.json.gz (MiB)" in text and "8/8" in text
    assert "reading [b]mi300x.json.gz (MiB)" in text and "4/8" in text  # a name is never read as markup
    assert hook.current_reporter() is None


def test_ingest_read_bar_draws_on_a_terminal(monkeypatch) -> None:
    """`porter ingest` on a terminal: the read bar (cli.read_progress) is drawn on the real
    rich console (it was handed the lazy wrapper and raised AttributeError), and the result
    line keeps its dim details; off a terminal the same line is plain text (print_parts)."""
    from pathlib import Path

    from profilers import progress as hook

    screen = io.StringIO()
    monkeypatch.setattr(cli.err, "_console", Console(file=screen, force_terminal=True, width=120))
    with cli.read_progress():
        hook.current_reporter()(Path("/t/h100.json.gz"), 4 << 20, 8 << 20)
    assert "reading h100.json.gz" in screen.getvalue() and hook.current_reporter() is None
    out = io.StringIO()
    monkeypatch.setattr(cli.out, "_console", Console(file=out, force_terminal=True, width=200))
    cli.out.print_parts("a -> b  ", ("kineto: 3 ops", "dim"))
    assert "a -> b  " in out.getvalue() and "\x1b[2mkineto: 3 ops" in out.getvalue()
    pipe = io.StringIO()
    monkeypatch.setattr(cli.out, "_console", None)
    monkeypatch.setattr(cli.sys, "stdout", pipe)
    cli.out.print_parts("a -> b  ", ("kineto: [b]3[/b] ops", "dim"))
    assert pipe.getvalue() == "a -> b  kineto: [b]3[/b] ops\n"
