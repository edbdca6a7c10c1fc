"""Ingest speed and memory at production trace sizes: porter vs bare orjson vs HTA.

Run from the repo root:  python benchmarks/ingest.py [--quick]

Builds Kineto traces of ~0.1M, 1M and 2.7M events by replicating a real corpus trace
(benchmarks/replicate.py; cached in benchmarks/.cache/), then times, each in a fresh
subprocess so peak RSS is that task's alone, alternating tasks within each repeat:

* porter:  profilers.detect.read_trace(path): sniff, gunzip, decode, link, validated tables
* orjson:  orjson.loads(gzip.decompress(path.read_bytes())): the bare parse, the yardstick
* hta:     hta.common.trace.parse_trace_file(path): HTA's parser on one file (its cheapest
           load path: what TraceAnalysis runs per rank, without the rank alignment)
* hta_ta:  hta.trace_analysis.TraceAnalysis(trace_dir=<dir holding only this file>)

Each child reports wall and CPU seconds around the task (imports excluded) and its peak
RSS (VmHWM, imports included) and RSS before the task. Results go to
benchmarks/.cache/results.json, the table into BENCHMARKS.md (between the ingest markers)
and the plot to benchmarks/ingest_scaling.svg. The rocprofv3 and XPlane corpus files are
timed the same way against their bare parse. Not run in CI.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.replicate import copies_for, replicate  # noqa: E402

CACHE = REPO / "benchmarks" / ".cache"
CORPUS = Path(os.environ.get("PORTER_TRACE_CORPUS", REPO.parent / "shared" / "traces"))
SOURCE = "kineto/a100_alexnet.json.gz"
SIZES = {"0.1M": 109_000, "1M": 1_000_000, "2.7M": 2_700_000}
KINETO_TASKS = ("porter", "orjson", "hta", "hta_ta")
HTA_REPEATS = {"0.1M": 3, "1M": 2, "2.7M": 1}  # HTA takes minutes at 2.7M events


# ---------------------------------------------------------------- child side

def _task(kind: str, path: Path) -> dict:
    """Run one task on `path` and describe its result (rows read) for the log."""
    if kind in ("porter", "porter_fmt"):
        from profilers.detect import read_trace
        r = read_trace(path)
        return {"ops": len(r.ops), "kernels": len(r.kernels), "events": r.meta.events_read}
    if kind == "orjson":
        import gzip

        import orjson
        data = path.read_bytes()
        doc = orjson.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
        return {"keys": len(doc)}
    if kind == "xspace":
        from profilers.xspace_proto import parse_xspace  # upb protobuf parse: the reader's first step
        space = parse_xspace(path.read_bytes())
        return {"planes": len(space.planes)}
    if kind == "hta":
        from hta.common.trace import parse_trace_file
        _, df, _ = parse_trace_file(str(path))
        return {"rows": len(df)}
    if kind == "hta_ta":
        from hta.trace_analysis import TraceAnalysis
        with tempfile.TemporaryDirectory() as d:
            os.symlink(path.resolve(), Path(d) / path.name)
            ta = TraceAnalysis(trace_dir=d)
            return {"rows": sum(len(df) for df in ta.t.traces.values())}
    raise SystemExit(f"unknown task {kind}")


def _preload(kind: str) -> None:
    """Import what the task needs before the clock starts."""
    import gzip  # noqa: F401

    import orjson  # noqa: F401
    if kind.startswith("porter"):
        import profilers.detect
        profilers.detect.readers()
    elif kind.startswith("hta"):
        import hta.common.trace  # noqa: F401
        import hta.trace_analysis  # noqa: F401
    elif kind == "xspace":
        import profilers.xspace_proto  # noqa: F401


def _hwm_kb() -> int:
    """Peak RSS of this process image (VmHWM). Not ru_maxrss: after fork+exec that still
    carries the parent's peak, which is GBs once the parent has built the big traces."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(kind: str, path: Path) -> None:
    import logging
    logging.disable(logging.CRITICAL)
    _preload(kind)
    rss0 = _hwm_kb()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    info = _task(kind, path)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": _hwm_kb() / 1024,
                      "base_rss_mb": rss0 / 1024, "info": info}))


# ---------------------------------------------------------------- parent side

@dataclass
class Sample:
    label: str  # trace label, e.g. "1M"
    kind: str
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    base_rss_mb: float
    info: dict


def run_child(kind: str, path: Path, label: str, timeout: float) -> Sample | None:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, str(path)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)
    except subprocess.TimeoutExpired:
        print(f"  {label:>5} {kind:<8} timed out after {timeout:.0f} s", flush=True)
        return None
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        print(f"  {label:>5} {kind:<8} failed rc={out.returncode}: {out.stderr.strip()[-300:]}", flush=True)
        return None
    s = Sample(label, kind, **json.loads(lines[-1]))
    print(f"  {label:>5} {kind:<8} wall {s.wall_s:7.2f} s  cpu {s.cpu_s:7.2f} s  peak {s.peak_rss_mb:8.0f} MB"
          f"  {s.info}", flush=True)
    return s


def build(label: str, events: int, source: Path) -> Path:
    """The cached replicated trace of ~`events` events."""
    out = CACHE / f"{source.name.removesuffix('.json.gz')}_{label}.json.gz"
    if not out.exists():
        n = copies_for(source, events)
        t = time.perf_counter()
        count = replicate(source, out, n)
        print(f"built {out.name}: {n} replicas, {count} events in {time.perf_counter() - t:.1f} s", flush=True)
    return out


def trace_facts(path: Path) -> dict:
    import gzip

    import orjson
    data = gzip.decompress(path.read_bytes())
    return {"events": len(orjson.loads(data)["traceEvents"]), "json_mb": len(data) / 2**20,
            "gz_mb": path.stat().st_size / 2**20}


def summarise(samples: list[Sample]) -> dict:
    walls = [s.wall_s for s in samples]
    cpus = [s.cpu_s for s in samples]
    return {"n": len(samples), "wall_med": statistics.median(walls), "wall_min": min(walls), "wall_max": max(walls),
            "cpu_med": statistics.median(cpus), "rss_mb": max(s.peak_rss_mb for s in samples),
            "base_rss_mb": min(s.base_rss_mb for s in samples)}


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    mem_kb = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal"))
    return {"nproc": os.cpu_count(), "cpu": cpu, "ram_gib": round(mem_kb / 2**20, 1),
            "loadavg_at_start": os.getloadavg(), "python": platform.python_version()}


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for pkg in ("orjson", "msgspec", "numpy", "pandas", "cydifflib", "HolisticTraceAnalysis", "xprof", "protobuf"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    out["porter"] = rev.stdout.strip() or "unknown"
    return out


def measure(jobs: list[tuple[str, Path, tuple[str, ...], int]], timeout: float) -> dict[tuple[str, str], list[Sample]]:
    """Run every (label, path, tasks, repeats) job, alternating tasks within each repeat."""
    got: dict[tuple[str, str], list[Sample]] = {}
    for label, path, tasks, repeats in jobs:
        for r in range(repeats):
            for kind in (tasks if r % 2 == 0 else tuple(reversed(tasks))):
                s = run_child(kind, path, label, timeout)
                if s:
                    got.setdefault((label, kind), []).append(s)
    return got


# ---------------------------------------------------------------- report

def _fmt_row(label: str, kind: str, st: dict, ref: dict | None, facts: dict) -> str:
    ratio = f"{st['wall_med'] / ref['wall_med']:.2f}x" if ref else ""
    cpu_ratio = f"{st['cpu_med'] / ref['cpu_med']:.2f}x" if ref else ""
    rss_x = st["rss_mb"] / facts["json_mb"] if facts.get("json_mb") else float("nan")
    return (f"| {label} | {facts.get('events', 0):,} | {facts.get('json_mb', 0):.1f} | {kind} | {st['n']} | "
            f"{st['wall_med']:.2f} ({st['wall_min']:.2f}–{st['wall_max']:.2f}) | {ratio} | {st['cpu_med']:.2f} | "
            f"{cpu_ratio} | {st['rss_mb']:.0f} ({st['base_rss_mb']:.0f}) | {rss_x:.2f} |")


def table(stats: dict, facts: dict, order: list[str], ref_kind: dict[str, str]) -> list[str]:
    lines = ["| trace | events | JSON MB | task | runs | wall s median (min–max) | wall / ref | CPU s median | "
             "CPU / ref | peak RSS MB (before task) | peak RSS / JSON size |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label in order:
        ref = stats.get((label, ref_kind.get(label, "orjson")))
        for (lab, kind), st in stats.items():
            if lab == label:
                lines.append(_fmt_row(label, kind, st, ref, facts[label]))
    return lines


def svg(stats: dict, facts: dict, labels: list[str], kinds: tuple[str, ...], out: Path,
        title: str = "Kineto ingest: median wall time vs events (log-log)") -> None:
    """Log-log plot of median wall time vs events, one polyline per task, written by hand."""
    import math
    pts = {k: [(facts[lab]["events"], stats[(lab, k)]["wall_med"]) for lab in labels if (lab, k) in stats]
           for k in kinds}
    allx = [x for p in pts.values() for x, _ in p]
    ally = [y for p in pts.values() for _, y in p]
    if not allx:
        return
    W, H, L, B, R, T = 640, 420, 70, 50, 150, 20
    lx0, lx1 = math.floor(math.log10(min(allx))), math.ceil(math.log10(max(allx)))
    ly0, ly1 = math.floor(math.log10(min(ally))), math.ceil(math.log10(max(ally)))
    lx1, ly1 = max(lx1, lx0 + 1), max(ly1, ly0 + 1)

    def px(x: float) -> float:
        return L + (math.log10(x) - lx0) / (lx1 - lx0) * (W - L - R)

    def py(y: float) -> float:
        return H - B - (math.log10(y) - ly0) / (ly1 - ly0) * (H - B - T)

    colors = {"porter": "#d62728", "orjson": "#1f77b4", "hta": "#2ca02c", "hta_ta": "#9467bd",
              "porter diagnose": "#d62728", "TraceLens 3 cmds": "#2ca02c", "porter read (1 trace)": "#ff7f0e", "orjson read (1 trace)": "#1f77b4"}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<text x="{L}" y="14">{title}</text>']
    for e in range(lx0, lx1 + 1):
        parts.append(f'<line x1="{px(10**e):.1f}" y1="{T}" x2="{px(10**e):.1f}" y2="{H - B}" stroke="#ddd"/>')
        parts.append(f'<text x="{px(10**e):.1f}" y="{H - B + 16}" text-anchor="middle">1e{e}</text>')
    for e in range(ly0, ly1 + 1):
        parts.append(f'<line x1="{L}" y1="{py(10**e):.1f}" x2="{W - R}" y2="{py(10**e):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{L - 6}" y="{py(10**e) + 4:.1f}" text-anchor="end">{10**e:g} s</text>')
    parts.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">trace events</text>')
    for i, (k, p) in enumerate(pts.items()):
        if not p:
            continue
        c = colors.get(k, "#333")
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in p)
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{c}" stroke-width="2"/>')
        parts += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>' for x, y in p]
        parts.append(f'<text x="{W - R + 10}" y="{T + 20 + 18 * i}" fill="{c}">{k}</text>')
    parts.append("</svg>")
    out.write_text("\n".join(parts) + "\n")


def write_markdown(block: str, part: str) -> None:
    """Replace the text between this part's markers in BENCHMARKS.md (the rest is hand-written)."""
    MARK_BEGIN, MARK_END = f"<!-- {part}:begin -->", f"<!-- {part}:end -->"
    md = REPO / "BENCHMARKS.md"
    text = md.read_text() if md.exists() else f"# Benchmarks\n\n{MARK_BEGIN}\n{MARK_END}\n"
    if MARK_BEGIN not in text:
        text += f"\n{MARK_BEGIN}\n{MARK_END}\n"
    head, rest = text.split(MARK_BEGIN, 1)
    tail = rest.split(MARK_END, 1)[1] if MARK_END in rest else ""
    md.write_text(f"{head}{MARK_BEGIN}\n{block}\n{MARK_END}{tail}")


def other_formats() -> list[tuple[str, Path, tuple[str, ...], str]]:
    """(label, path, tasks, reference task) for the non-Kineto corpus files that exist."""
    out = []
    roc = CORPUS / "rocprof" / "rocprofv3_908_results.json.gz"
    if roc.exists():
        out.append(("rocprofv3", roc, ("porter", "orjson"), "orjson"))
    xp = CORPUS / "xplane" / "mi300x_jax_conv3d.xplane.pb"
    if xp.exists() and (REPO / "profilers" / "xplane.py").exists():
        out.append(("xplane", xp, ("porter", "xspace"), "xspace"))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Ingest speed and memory vs orjson and HTA")
    ap.add_argument("--quick", action="store_true", help="0.1M events only, 3 repeats, no 2.7M")
    ap.add_argument("--child", nargs=2, metavar=("TASK", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--source", default=SOURCE, help=f"corpus trace to replicate (default {SOURCE})")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--part", choices=("kineto", "other", "all"), default="all",
                    help="kineto: replicated Kineto traces; other: rocprofv3 and XPlane corpus files")
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return

    info = {"machine": machine(), "versions": versions(), "date": dt.datetime.now().isoformat(timespec="minutes"),
            "command": " ".join(["python benchmarks/ingest.py", *(sys.argv[1:] if argv is None else argv)]),
            "source": args.source}
    if args.part in ("kineto", "all"):
        run_kineto(args, info)
    if args.part in ("other", "all"):
        run_other(args, info)


def header(info: dict, ref_note: str) -> list[str]:
    m, v = info["machine"], info["versions"]
    return [
        f"Command: `{info['command']}`  ",
        f"Date: {info['date']}; machine: {m['nproc']} CPUs, {m['cpu']}, {m['ram_gib']} GiB RAM; "
        f"load average at start {m['loadavg_at_start'][0]:.1f}, at end {os.getloadavg()[0]:.1f}; Python {m['python']}  ",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        "",
        f"Ratios are against {ref_note} in the same run. Wall and CPU seconds are for the task alone "
        "(imports excluded); peak RSS is the child process's VmHWM (imports included; RSS before the task in "
        "brackets).",
        "",
    ]


def save(name: str, info: dict, facts: dict, samples: dict) -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / f"{name}.json").write_text(json.dumps(
        {"info": info, "facts": facts, "samples": [asdict(s) for v in samples.values() for s in v]}, indent=1))


def run_kineto(args: argparse.Namespace, info: dict) -> None:
    source = CORPUS / args.source
    sizes = {"0.1M": SIZES["0.1M"]} if args.quick else SIZES
    repeats = {"0.1M": 3 if args.quick else args.repeats, "1M": 3, "2.7M": 2}
    paths = {label: build(label, n, source) for label, n in sizes.items()}
    facts = {label: trace_facts(p) for label, p in paths.items()}
    ours = ("porter", "orjson")
    hta = () if args.no_hta else ("hta", "hta_ta")
    jobs = []
    for label, p in paths.items():
        jobs.append((label, p, ours + hta if HTA_REPEATS[label] >= repeats[label] else ours, repeats[label]))
        if hta and HTA_REPEATS[label] < repeats[label]:
            jobs.append((label, p, hta, HTA_REPEATS[label]))
    samples = measure(jobs, args.timeout)
    stats = {key: summarise(v) for key, v in samples.items()}
    save("results_kineto", info, facts, samples)
    svg(stats, facts, list(sizes), ours + hta, REPO / "benchmarks" / "ingest_scaling.svg")
    block = "\n".join([
        f"Source trace: `{args.source}` from the corpus, replicated by benchmarks/replicate.py; "
        "gzip level 3.  ",
        *header(info, "the bare parse (`orjson`: gzip.decompress + orjson.loads)"),
        *table(stats, facts, list(sizes), {}),
        "",
        "![ingest time vs events](benchmarks/ingest_scaling.svg)",
    ])
    write_markdown(block, "ingest")
    print("wrote BENCHMARKS.md (ingest), benchmarks/ingest_scaling.svg", flush=True)


def run_other(args: argparse.Namespace, info: dict) -> None:
    extra = other_formats()
    facts, jobs = {}, []
    for label, p, t, _ in extra:
        data = p.read_bytes()
        size = len(gzip.decompress(data)) if data[:2] == b"\x1f\x8b" else len(data)
        facts[label] = {"events": 0, "json_mb": size / 2**20}
        jobs.append((label, p, t, 3 if args.quick else args.repeats))
    samples = measure(jobs, args.timeout)
    stats = {key: summarise(v) for key, v in samples.items()}
    for label, *_ in extra:
        got = samples.get((label, "porter"))
        facts[label]["events"] = got[0].info.get("events", 0) if got else 0
    save("results_other", info, facts, samples)
    ref = {label: r for label, _, _, r in extra}
    missing = "" if any(lab == "xplane" for lab, *_ in extra) else (
        "\nXPlane: not measured (profilers/xplane.py is not on this branch yet).\n")
    block = "\n".join([*header(info, "the bare parse (`orjson` for rocprofv3 JSON, `xspace`: "
                                      "the upb protobuf parse of the XSpace for XPlane)"),
                       *table(stats, facts, [lab for lab, *_ in extra], ref), missing])
    write_markdown(block, "ingest-other")
    print("wrote BENCHMARKS.md (ingest-other)", flush=True)


if __name__ == "__main__":
    main()
