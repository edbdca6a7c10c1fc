"""`porter diagnose` (two runs in, diagnosis.json and the reports out) and `porter report`
(the reports again, from diagnosis.json)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from porter.cli.console import DIAGNOSE_STAGES, fail, out, stage_progress
from porter.cli.process import MAX_INFLATE_HELP, imports_settled, object_strings, runs_no_model, set_max_inflate
from porter.core.errors import PorterError
from porter.runtime.policy import WARMUP


def diagnose(
    model: Optional[str] = typer.Argument(None, help="Model to capture when --from/--to name targets (zoo name or pkg.mod:factory; default: transformer)."),
    src: str = typer.Option(..., "--from", help="Source run: a bundle directory, a trace file, a multi-rank job (a directory of one trace per rank, or its job bundle), or a target like cpu (captured now)."),
    tgt: str = typer.Option(..., "--to", help="Target run: a bundle directory, a trace file, a multi-rank job (ranks pair by id with the source's), or a target like xla (captured now)."),
    out_dir: Path = typer.Option(Path("diagnosis"), "-o", "--out", help="Directory for diagnosis.json and the two bundles."),
    oracle: Optional[str] = typer.Option(None, "--oracle", help="Accuracy oracle for live captures: fp64 (the model in float64 on the CPU)."),
    as_json: bool = typer.Option(False, "--json", help="Print diagnosis.json instead of the summary."),
    force: bool = typer.Option(False, "--force", help="Compare runs of different models anyway."),
    catalogue: Optional[Path] = typer.Option(None, "--catalogue", help="Fix catalogue TOML merged over the built-in one (docs/fixes.md)."),
    no_report: bool = typer.Option(False, "--no-report", help="Write only diagnosis.json, not report.html, report.md and summary.md/.html."),
    steps: int = typer.Option(10, "--steps", help="Live capture: profiled forwards per side (10: each module gap's 95% interval runs from the 2nd to the 9th per-step gap, porter.analysis.gap_noise)."),
    warmup: int = typer.Option(WARMUP, "--warmup", help="Live capture: unrecorded forwards before timing and profiling (the measurement policy's default, as capture and bench)."),
    repeats: int = typer.Option(10, "--repeats", help="Live capture: timed (unprofiled) forwards per side."),
    confirm: str = typer.Option("5", "--confirm", metavar="N|all", help="Live capture: re-time the N largest module gaps alone on both stacks (each module with the arguments it got, interleaved, with 95% intervals); a module is then significant only where its gap alone bears the profiled one out, and the summary and the fix plan rank those. all: every module whose profiled gap is significant (minutes on a real-size model). 0: off. PORTER_CONFIRM_REPEATS (30) and PORTER_CONFIRM_BUDGET_S (20 s; 90 with all) set how long: more repeats, narrower intervals."),
    with_tune: bool = typer.Option(False, "--tune", help="Live pair: after the diagnosis, try the fix plan's recipes on the target (porter tune, into DIR/tune/) and carry each measured recovery into the fix plan and the reports (a Tried section)."),
    tune_budget: float = typer.Option(180.0, "--tune-budget", help="With --tune: seconds for the tune, compiles included."),
    with_perfetto: bool = typer.Option(False, "--perfetto", help="Also write DIR/pair.pftrace: both runs on one Perfetto timeline, each matched group linked by a flow (as `porter export DIR`)."),
    with_ops: bool = typer.Option(False, "--ops", help="Live capture: also check each op alone on the target stack (porter ops) and flag fallbacks, unsupported and mismatched ops in the report and fix plan."),
    max_inflate: Optional[float] = typer.Option(None, "--max-inflate", help=MAX_INFLATE_HELP),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Precision port: the target (captured now) runs the model cast to fp32, fp64, bf16 or fp16; tolerances follow that dtype and each finding says whether its error is what the dtype implies or more."),
    target_model: Optional[str] = typer.Option(None, "--target-model", help="The target ran a rewrite of MODEL in JAX (FILE.py:factory returning a Flax NNX or Equinox module), its modules paired with MODEL's by their parameters: both factories run here to measure the first suspect module's local error on one recorded call and name the op where the rewrite's computation leaves the original's. Live (--from cpu --to xla) or from two captures."),
    autocast: Optional[str] = typer.Option(None, "--autocast", help="Precision port on a torch stack: the target's forward runs under torch.autocast to bf16 or fp16 (weights stay as given)."),
) -> None:
    """Align two runs, attribute time and accuracy loss per op and module, rank fixes.

    Examples: porter diagnose transformer --from cpu --to xla -o diag/ ;
    porter diagnose --from h100.json.gz --to mi300x.json.gz -o diag/ ;
    porter diagnose --from nccl_job/ --to rccl_job/ -o diag/ (job.json, job.md, one diagnosis per rank) ;
    porter diagnose model.py:build --from torch_cpu/ --to jax_xla/ --target-model jax_model.py:build (a JAX rewrite)
    """
    from porter.core.jobranks import is_job_path
    from porter.pipeline.preflight import check_inputs

    jobs = [is_job_path(src), is_job_path(tgt)]
    if any(jobs):
        live_only = [flag for flag, on in (("--tune", with_tune), ("--ops", with_ops), ("--dtype", dtype), ("--autocast", autocast),
                                           ("--oracle", oracle), ("--perfetto", with_perfetto),
                                           ("--target-model", target_model)) if on]
        if live_only:
            verb = "applies" if len(live_only) == 1 else "apply"
            fail(PorterError(f"{', '.join(live_only)} {verb} to one pair of runs, not to a job pair",
                             hint="drop them, or diagnose one rank's pair (DIR/rank-N/ holds each rank's diagnosis: "
                                  "porter export DIR/rank-N --perfetto)"))
        return _diagnose_jobs(src, tgt, jobs, out_dir, catalogue, no_report, as_json, model)
    try:
        check_inputs(src, tgt, model)  # every typo said at once, before torch, jax or the tables load
        if oracle not in (None, "fp64"):
            raise PorterError(f"--oracle must be fp64, not {oracle!r}")
        confirm_n = _confirm_count(confirm)
        recorded = [(role, text) for role, text in (("source", src), ("target", tgt)) if Path(text).exists()]
        if with_tune and recorded:
            role, text = recorded[0]
            raise PorterError(f"--tune runs the pair here, but the {role} is a recorded run ({text})",
                              hint="diagnose with targets (--from cpu --to cpu:inductor), or drop --tune")
    except PorterError as exc:
        fail(exc)
    import shlex

    import orjson

    from porter.capture.options import CaptureOptions
    from porter.pipeline.diagnose import diagnose_specs
    from reports.terminal import summary_lines

    imports_settled()
    if runs_no_model(sys.argv[1:]):
        object_strings()
    set_max_inflate(max_inflate)
    opts = CaptureOptions(steps=steps, warmup=warmup, repeats=repeats)
    command = "porter " + shlex.join(sys.argv[1:]) if sys.argv[1:] else None
    try:
        with stage_progress("diagnosing", DIAGNOSE_STAGES) as progress:
            # keep_analysis=False: the analysis is freed before the reports render (the peak memory)
            _, dest = diagnose_specs(src, tgt, out_dir, model=model, target_model=target_model, force=force, oracle=oracle, catalogue=catalogue,
                                     report=not no_report, keep_analysis=False, capture_options=opts,
                                     progress=progress, command=command, ops=with_ops, confirm=confirm_n, target_dtype=dtype or "",
                                     target_autocast=autocast or "")
    except PorterError as exc:
        fail(exc)
    tuned = _tune_after(dest.parent, tune_budget, catalogue, not no_report) if with_tune else None
    timeline = _timeline_after(dest.parent) if with_perfetto else None
    if as_json:
        sys.stdout.write(dest.read_text())
        return
    payload = orjson.loads(dest.read_bytes())  # porter wrote it once: no NaN
    for line in summary_lines(payload, width=min(100, out.width)):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    if tuned is not None:
        from porter.cli.cmd_tune import show

        out.print("tried on the target (porter tune):", highlight=False, markup=False)
        show(tuned, dest.parent / "tune")
    wrote = ("wrote diagnosis.json" + (", report.html, report.md, summary.md, summary.html" if not no_report else "")
             + (f", {timeline.path.name}" if timeline is not None else ""))
    out.print(f"{wrote} in", highlight=False, markup=False)
    out.print(f"  {dest.parent}", highlight=False, markup=False, soft_wrap=True)


def _diagnose_jobs(src: str, tgt: str, jobs: list[bool], out_dir: Path, catalogue: Optional[Path], no_report: bool,
                   as_json: bool, model: Optional[str]) -> None:
    """Two multi-rank jobs (directories of rank traces, or job bundles): ranks paired by id."""
    import shlex

    try:
        if not all(jobs):
            job, one = (src, tgt) if jobs[0] else (tgt, src)
            raise PorterError(f"{job} is a multi-rank job and {one} is one run: a job diagnoses against a job",
                              hint="pass the other job's directory too, or one rank's trace on each side")
        if model is not None:
            raise PorterError("a job pair is diagnosed from its recorded traces: no MODEL", hint=f"drop {model!r}")
    except PorterError as exc:
        fail(exc)
    imports_settled()
    from porter.analysis.fixplan import catalogue_from
    from porter.pipeline.jobpair import JOB_STAGES, diagnose_jobs, job_lines

    command = "porter " + shlex.join(sys.argv[1:]) if sys.argv[1:] else None
    try:
        with stage_progress("diagnosing the job", JOB_STAGES) as progress:
            dest = diagnose_jobs(Path(src), Path(tgt), out_dir, catalogue=catalogue_from(catalogue),
                                 report=not no_report, progress=progress, command=command)
    except PorterError as exc:
        fail(exc)
    if as_json:
        sys.stdout.write(dest.read_text())
        return
    import json

    for line in job_lines(json.loads(dest.read_text())):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    out.print(f"wrote job.json, job.md and one diagnosis per rank (rank-N/) in\n  {dest.parent}", highlight=False,
              markup=False, soft_wrap=True)


def _timeline_after(folder: Path):
    """diagnose --perfetto: the pair's timeline beside diagnosis.json (porter.pipeline.timeline)."""
    from porter.pipeline.timeline import PAIR_TIMELINE, export_diagnosis

    try:
        return export_diagnosis(folder, folder / PAIR_TIMELINE)
    except PorterError as exc:
        fail(exc)


def _tune_after(folder: Path, budget: float, catalogue: Optional[Path], report: bool) -> dict:
    """diagnose --tune's second half (porter.tune.diagnosis); the diagnosis stays written
    whatever happens here."""
    from porter.cli.console import err
    from porter.tune.diagnosis import tune_diagnosis
    from porter.tune.run import TuneOptions

    try:
        with err.status("tuning", spinner="dots") as status:
            return tune_diagnosis(folder, TuneOptions(budget_s=budget), catalogue, report,
                                  progress=lambda msg: (status.update(msg), err.print(f"  tune: {msg}", highlight=False,
                                                                                      markup=False)))
    except PorterError as exc:
        fail(exc)
    except KeyboardInterrupt:
        err.print(f"interrupted: the diagnosis is in {folder}; what the tune measured is in {folder}/tune/tune-cache.json",
                  highlight=False, markup=False)
        raise typer.Exit(130) from None


def report(
    diagnosis_dir: Path = typer.Argument(..., help="A directory written by `porter diagnose` (holds diagnosis.json)."),
    fmt: str = typer.Option("all", "--format", help="html (report.html + summary.html), md (report.md + summary.md), json, or all."),
    out_path: Optional[Path] = typer.Option(None, "-o", "--out", help="Output directory (default: DIAGNOSIS_DIR), or a file name (.html/.md/.json) for one format."),
) -> None:
    """Render a diagnosis: report.html (one self-contained file), report.md (for a PR), summary.md and summary.html (one page, plain words).

    Example: porter report diag/ --format html -o qwen.html
    """
    from reports.build import FORMATS, write_reports

    formats = list(FORMATS) if fmt == "all" else [fmt]
    try:
        paths = write_reports(diagnosis_dir, formats, out_path)
    except PorterError as exc:
        fail(exc)
    for p in paths:
        out.print(str(p), highlight=False)


def _confirm_count(text: str) -> int:
    """--confirm's value as porter.pipeline.confirmation takes it; a bad one, or a bad
    PORTER_CONFIRM_REPEATS / PORTER_CONFIRM_BUDGET_S, is a PorterError before any capture."""
    import os

    from porter.pipeline.confirmation import effort_from_env, parse_confirm

    try:
        n = parse_confirm(text)
    except ValueError:
        raise PorterError(f"--confirm takes a count of modules or 'all', not {text!r}",
                          hint="--confirm 5 (the default), --confirm all, --confirm 0 (off)") from None
    if n:
        effort_from_env(os.environ)
    return n
