"""The `porter` command line: parses options, calls one library function per command,
prints. Logic lives in the modules it calls, so everything here is scriptable from Python.

This module holds the typer app, its global options and the command list; each command
lives in a cmd_* module whose heavy imports stay inside the command's body, so listing
them all (`porter --help`) loads no tables, no rich and no model stack."""

from __future__ import annotations

import typer

from porter.cli import cmd_bench, cmd_capture, cmd_diagnose, cmd_export, cmd_ingest, cmd_ops, cmd_tune, console, process
from porter.cli import params as cli_params

process.flag_type_hidden()
cli_params.install()  # str/Path/int/float options without typer's pydantic adapters

app = typer.Typer(
    name="porter",
    help=(
        "Find where time and accuracy are lost when a model moves between accelerators "
        "(CUDA -> TPU, CUDA -> ROCm, eager -> compiled), and what to fix first.\n\n"
        "Start with `porter diagnose MODEL --from cpu --to xla` (runs both sides now) or "
        "`porter diagnose --from A.json.gz --to B.json.gz` (two recorded traces); it writes "
        "diagnosis.json, report.html, report.md, summary.md and summary.html. `porter show TRACE` looks at one trace."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: typer's rich help imports markdown-it
)


# Commands that call imports_settled() once their table imports are in; main() holds the
# cyclic collector off until then (importing pandas + pyarrow with it on costs more).
SETTLING_COMMANDS = {"diagnose", "ingest", "show"}


@app.callback()
def options(ctx: typer.Context,
            debug: bool = typer.Option(False, "--debug", help="On an error, also print the full chained traceback "
                                                               "(the user's code and the stack's own error).")) -> None:
    """Global options (before the command: porter --debug diagnose ...)."""
    console.DEBUG["on"] = debug
    if ctx.invoked_subcommand not in SETTLING_COMMANDS:
        import gc

        gc.enable()  # main() turned it off for the imports; this command never calls imports_settled()


# `porter --help` lists the commands in this order.
for command in (cmd_ingest.ingest, cmd_ingest.show, cmd_diagnose.diagnose, cmd_capture.capture, cmd_capture.models,
                cmd_capture.targets, cmd_diagnose.report, cmd_export.export):
    app.command()(command)

bench_app = typer.Typer(
    cls=cmd_bench.BenchGroup, no_args_is_help=True, rich_markup_mode="rich",
    help="Benchmark models across stacks with a history: `porter bench SUITE.toml|builtin|MODEL --on A --on B`, "
         "then `porter bench report` and `porter regress`.",
)
app.add_typer(bench_app, name="bench")
bench_app.command("run")(cmd_bench.bench_run)
bench_app.command("report")(cmd_bench.bench_report)
bench_app.command("import")(cmd_bench.bench_import)

app.command()(cmd_bench.regress)
app.command()(cmd_ops.ops)
app.command()(cmd_tune.tune)


def main() -> None:
    process.main(app)


def run() -> None:
    """The entry point (console script, python -m porter)."""
    process.run(app)


if __name__ == "__main__":
    run()
