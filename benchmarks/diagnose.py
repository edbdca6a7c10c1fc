"""Whole commands, side by side in one run: porter against TraceLens and HTA.

Run from the repo root:  python benchmarks/diagnose.py --part PART [--part PART ...]
then                     python benchmarks/diagnose.py --report   (BENCHMARKS.md + plot)

Every measurement is a whole process as a user runs it (interpreter start, imports, reading,
analysis, writing), timed by this script; tasks alternate within each repeat so load drifts
hit both sides. Parts (each saved to benchmarks/.cache/diagnose_<part>.json on its own, so
a long run can be split and resumed):

* pair:    the corpus Qwen1.5-0.5B H100/MI300X pair (TraceLens's own test pair):
           `porter diagnose --from H100 --to MI300X -o DIR` (reports included) against
           TraceLens's generate_perf_report_pytorch on each trace + compare_perf_reports_pytorch
           (the three commands of ../shared/peers/README.md, run from its own venv, --tracelens).
* ingest:  `porter ingest TRACE -o DIR` against a process that runs HTA's
           `TraceAnalysis(trace_dir=DIR)`, on the corpus H100 Qwen trace and its 1M replica.
* read:    porter's reader alone against the bare gunzip + orjson.loads, in process (imports
           excluded; benchmarks/ingest.py's child), on the H100 Qwen trace replicated to
           0.1M, 1M and 2.7M events.
* scale:   `porter diagnose` on the replicated H100/MI300X pairs of 0.1M, 1M and 2.7M
           events each (the plot: time against events).
* pair1M:  the `pair` comparison on the 0.1M and 1M replicated pairs.

Peak RSS is the largest sum of RSS over the process and all its descendants (psutil, sampled
every 50 ms): porter's parallel readers count. Replicas are built by benchmarks/replicate.py
into benchmarks/.cache/ (gitignored). Not run in CI.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.ingest import CACHE, CORPUS, machine, run_child, svg, versions, write_markdown  # noqa: E402
from benchmarks.replicate import copies_for, load, replicate  # noqa: E402

PAIR = {"source": "kineto/h100_Qwen_Qwen1.5-0.5B-Chat.json.gz", "target": "kineto/mi300x_Qwen_Qwen1.5-0.5B-Chat.json.gz"}
SIZES = {"0.1M": 100_000, "1M": 1_000_000, "2.7M": 2_700_000}
# TraceLens lives in its own venv (../shared/peers/README.md says how to make it); point
# TRACELENS_PYTHON at that venv's python. Default: a venv named tl-venv beside the checkout.
TRACELENS = Path(os.environ.get("TRACELENS_PYTHON", str(REPO.parent / "tl-venv" / "bin" / "python")))


def tracelens_python() -> str:
    if not TRACELENS.is_file():
        sys.exit(f"benchmarks/diagnose.py: no TraceLens python at {TRACELENS}; install TraceLens in its own venv "
                 "(../shared/peers/README.md) and set TRACELENS_PYTHON to its bin/python")
    return str(TRACELENS)
PORTER = [sys.executable, "-m", "porter"]


# ---------------------------------------------------------------- one whole process

@dataclass
class Run:
    """One whole-command measurement (several processes for TraceLens, summed)."""

    label: str  # data set, e.g. "qwen" or "1M"
    task: str
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    ok: bool = True
    note: str = ""
    steps: list[float] = field(default_factory=list)  # per-process walls for multi-command tasks


def _tree_rss(proc: "psutil.Process") -> int:  # noqa: F821 - psutil is imported by measure()
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except Exception:  # noqa: BLE001 - a child that just exited
            pass
    return total


def timed(cmd: list[str], timeout: float, cwd: Path = REPO) -> tuple[float, float, float, bool, str]:
    """Wall, CPU (process + reaped descendants, from wait4), peak tree RSS MB, ok, stderr tail."""
    import psutil

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    err = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        try:
            ps = psutil.Process(proc.pid)
            while not done.is_set():
                peak = max(peak, _tree_rss(ps))
                done.wait(0.05)
        except psutil.NoSuchProcess:
            pass

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    deadline = t0 + timeout
    status, usage = 0, None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join()
    err.seek(0)
    tail = err.read().decode(errors="replace").strip()[-300:]
    timed_out = wall >= timeout
    ok = proc.returncode == 0 and not timed_out
    note = f"timed out after {timeout:.0f} s" if timed_out else ("" if ok else f"rc={proc.returncode}: {tail}")
    return wall, usage.ru_utime + usage.ru_stime, peak / 2**20, ok, note


def run_commands(label: str, task: str, cmds: list[list[str]], timeout: float) -> Run:
    walls, cpu, peak, ok, note = [], 0.0, 0.0, True, ""
    for cmd in cmds:
        w, c, p, good, why = timed(cmd, timeout - sum(walls))
        walls.append(w)
        cpu += c
        peak = max(peak, p)
        if not good:
            ok, note = False, why
            break
    r = Run(label, task, sum(walls), cpu, peak, ok, note, walls)
    print(f"  {label:>5} {task:<16} wall {r.wall_s:7.2f} s  cpu {r.cpu_s:7.2f} s  peak {r.peak_rss_mb:7.0f} MB"
          f"  {'' if ok else note}", flush=True)
    return r


# ---------------------------------------------------------------- the commands

def porter_diagnose(src: Path, tgt: Path, out: Path) -> list[list[str]]:
    return [[*PORTER, "diagnose", "--from", str(src), "--to", str(tgt), "-o", str(out)]]


def tracelens_pair(src: Path, tgt: Path, out: Path) -> list[list[str]]:
    """The three commands a TraceLens user runs to compare two traces (peers README)."""
    rep = [tracelens_python(), "-m", "TraceLens.Reporting.generate_perf_report_pytorch"]
    return [
        [*rep, "--profile_json_path", str(src), "--output_csvs_dir", str(out / "a"), "--enable_kernel_summary", "--short_kernel_study"],
        [*rep, "--profile_json_path", str(tgt), "--output_csvs_dir", str(out / "b"), "--enable_kernel_summary", "--short_kernel_study"],
        [tracelens_python(), "-m", "TraceLens.Reporting.compare_perf_reports_pytorch", str(out / "a"), str(out / "b"),
         "--names", "a", "b", "--sheets", "all", "-o", str(out / "cmp.xlsx"), "--output_csvs_dir", str(out / "cmp")],
    ]


def porter_ingest(trace: Path, out: Path) -> list[list[str]]:
    return [[*PORTER, "ingest", str(trace), "-o", str(out)]]


def hta_load(trace: Path, out: Path) -> list[list[str]]:
    """A process that loads the trace as HTA's users do: TraceAnalysis on a folder holding it."""
    out.mkdir(parents=True, exist_ok=True)
    link = out / "rank-0.json.gz"
    if not link.exists():
        os.symlink(trace.resolve(), link)
    code = ("import logging; logging.disable(logging.CRITICAL)\n"
            "from hta.trace_analysis import TraceAnalysis\n"
            f"TraceAnalysis(trace_dir={str(out)!r})\n")
    return [[sys.executable, "-c", code]]


# ---------------------------------------------------------------- data

def replica(side: str, label: str) -> Path:
    """The cached replica of the corpus Qwen trace of `side` at ~SIZES[label] events."""
    source = CORPUS / PAIR[side]
    out = CACHE / f"{source.name.split('_')[0]}_qwen_{label}.json.gz"
    if not out.exists():
        n = copies_for(source, SIZES[label])
        count = replicate(source, out, n)
        print(f"built {out.name}: {n} replicas, {count} events", flush=True)
    return out


def facts(path: Path) -> dict:
    """Events and uncompressed JSON size, streamed (a 2.7M-event trace is 1.3 GB of JSON)."""
    raw = 0
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            raw += len(d.decompress(chunk))
    name = path.name
    if name.startswith(("h100", "mi300x")) and "_qwen_" in name:
        side = "source" if name.startswith("h100") else "target"
        src = load(CORPUS / PAIR[side])
        events = len(src.envelope) + copies_for(CORPUS / PAIR[side], SIZES[name.split("_qwen_")[1].removesuffix(".json.gz")]) * len(src.body)
    else:
        import gzip

        import orjson
        events = len(orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"])
    return {"events": events, "json_mb": raw / 2**20, "gz_mb": path.stat().st_size / 2**20}


def pair_paths(label: str) -> tuple[Path, Path]:
    if label == "qwen":
        return CORPUS / PAIR["source"], CORPUS / PAIR["target"]
    return replica("source", label), replica("target", label)


# ---------------------------------------------------------------- parts

def alternate(label: str, tasks: dict[str, object], repeats: dict[str, int], timeout: float) -> list[Run]:
    """Each task `repeats[task]` times, alternating order between rounds, each in a fresh out dir."""
    runs: list[Run] = []
    names = list(tasks)
    for r in range(max(repeats.values())):
        for task in (names if r % 2 == 0 else names[::-1]):
            if r >= repeats[task]:
                continue
            with tempfile.TemporaryDirectory(prefix="porter-bench-") as tmp:
                runs.append(run_commands(label, task, tasks[task](Path(tmp)), timeout))  # type: ignore[operator]
    return runs


def part_pair(labels: list[str], repeats: int, peer_repeats: int, timeout: float) -> tuple[list[Run], dict]:
    runs, data = [], {}
    for label in labels:
        src, tgt = pair_paths(label)
        data[label] = {"source": facts(src), "target": facts(tgt)}
        runs += alternate(label, {
            "porter diagnose": lambda out, s=src, t=tgt: porter_diagnose(s, t, out),
            "TraceLens 3 cmds": lambda out, s=src, t=tgt: tracelens_pair(s, t, out),
        }, {"porter diagnose": repeats, "TraceLens 3 cmds": peer_repeats}, timeout)
    return runs, data


def part_ingest(repeats: int, timeout: float) -> tuple[list[Run], dict]:
    runs, data = [], {}
    for label, path in (("qwen", CORPUS / PAIR["source"]), ("1M", replica("source", "1M"))):
        data[label] = facts(path)
        n = repeats if label == "qwen" else 1
        runs += alternate(label, {
            "porter ingest": lambda out, p=path: porter_ingest(p, out),
            "HTA TraceAnalysis": lambda out, p=path: hta_load(p, out),
        }, {"porter ingest": n, "HTA TraceAnalysis": n}, timeout)
    return runs, data


def part_read(sizes: list[str], timeout: float) -> tuple[list[Run], dict]:
    runs, data = [], {}
    for label in sizes:
        path = replica("source", label)
        data[label] = facts(path)
        n = 3 if label == "0.1M" else 1
        for r in range(n):
            for kind in (("porter", "orjson") if r % 2 == 0 else ("orjson", "porter")):
                s = run_child(kind, path, label, timeout)
                if s:
                    runs.append(Run(label, f"read: {kind}", s.wall_s, s.cpu_s, s.peak_rss_mb))
    return runs, data


def part_scale(sizes: list[str], timeout: float) -> tuple[list[Run], dict]:
    runs, data = [], {}
    for label in sizes:
        src, tgt = pair_paths(label)
        data[label] = {"source": facts(src), "target": facts(tgt)}
        runs += alternate(label, {"porter diagnose": lambda out, s=src, t=tgt: porter_diagnose(s, t, out)},
                          {"porter diagnose": 2 if label == "0.1M" else 1}, timeout)
    return runs, data


# ---------------------------------------------------------------- report

def load_parts() -> dict[str, dict]:
    """Saved parts by name; <part>_<sizes> files (pair1M, scale run size by size) merge into <part>."""
    parts: dict[str, dict] = {}
    for p in sorted(CACHE.glob("diagnose_*.json")):
        name, part = p.stem.removeprefix("diagnose_"), json.loads(p.read_text())
        base = name.split("_", 1)[0]
        if base in parts:
            merged = parts[base]
            merged["runs"] += part["runs"]
            merged["data"].update(part["data"])
            merged.setdefault("more_info", []).append(part["info"])
        else:
            parts[base] = part
    return parts


def stats_of(runs: list[dict]) -> dict[tuple[str, str], dict]:
    by: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        by.setdefault((r["label"], r["task"]), []).append(r)
    out = {}
    for key, rs in by.items():
        good = [r for r in rs if r["ok"]]
        use = good or rs
        walls = [r["wall_s"] for r in use]
        out[key] = {"n": len(use), "ok": bool(good), "wall_med": statistics.median(walls), "wall_min": min(walls),
                    "wall_max": max(walls), "cpu_med": statistics.median(r["cpu_s"] for r in use),
                    "rss_mb": max(r["peak_rss_mb"] for r in use), "note": "" if good else rs[0]["note"]}
    return out


def _json_mb(data: dict, label: str) -> float:
    d = data[label]
    return d["source"]["json_mb"] + d["target"]["json_mb"] if "source" in d else d["json_mb"]


def _events(data: dict, label: str) -> int:
    d = data[label]
    return d["source"]["events"] + d["target"]["events"] if "source" in d else d["events"]


def comparison_table(part: dict, ours: str, peer: str, what: str) -> list[str]:
    st, data = stats_of(part["runs"]), part["data"]
    lines = [f"| data | events | JSON MB | task | runs | wall s median (min–max) | CPU s median | peak RSS MB | RSS / JSON | {what} |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for label in data:
        mine, theirs = st.get((label, ours)), st.get((label, peer))
        for task, s in ((ours, mine), (peer, theirs)):
            if not s:
                continue
            speed = ""
            if task == ours and mine and theirs:
                bound = "≥ " if not theirs["ok"] else ""
                speed = f"{bound}{theirs['wall_med'] / mine['wall_med']:.1f}x faster (CPU {bound}{theirs['cpu_med'] / mine['cpu_med']:.1f}x)"
            wall = (f"{s['wall_med']:.2f} ({s['wall_min']:.2f}–{s['wall_max']:.2f})" if s["ok"]
                    else f"> {s['wall_med']:.0f} ({s['note']})")
            lines.append(f"| {label} | {_events(data, label):,} | {_json_mb(data, label):.0f} | {task} | {s['n']} | {wall} | "
                         f"{s['cpu_med']:.2f} | {s['rss_mb']:.0f} | {s['rss_mb'] / _json_mb(data, label):.2f} | {speed} |")
    return lines


def simple_table(part: dict, ref: str | None = None) -> list[str]:
    st, data = stats_of(part["runs"]), part["data"]
    lines = ["| data | events | JSON MB | task | runs | wall s median (min–max) | CPU s median | CPU / ref | peak RSS MB | RSS / JSON | us CPU per event |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (label, task), s in st.items():
        r = st.get((label, ref)) if ref else None
        ratio = f"{s['cpu_med'] / r['cpu_med']:.2f}x" if r else ""
        ev = _events(data, label)
        lines.append(f"| {label} | {ev:,} | {_json_mb(data, label):.0f} | {task} | {s['n']} | "
                     f"{s['wall_med']:.2f} ({s['wall_min']:.2f}–{s['wall_max']:.2f}) | {s['cpu_med']:.2f} | {ratio} | "
                     f"{s['rss_mb']:.0f} | {s['rss_mb'] / _json_mb(data, label):.2f} | {s['cpu_med'] / ev * 1e6:.1f} |")
    return lines


def header(part: dict) -> list[str]:
    lines = []
    for info in [part["info"], *part.get("more_info", [])]:
        m, v = info["machine"], info["versions"]
        lines += [f"Command: `{info['command']}`  ",
                  f"Date: {info['date']}; machine: {m['nproc']} CPUs, {m['cpu']}, {m['ram_gib']} GiB RAM; "
                  f"load average at start {m['loadavg_at_start'][0]:.1f}, at end {info['load_end']:.1f}; Python {m['python']}  ",
                  "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + "  "]
    return [*lines, ""]


def report() -> None:
    parts = load_parts()
    block: list[str] = []
    titles = {"pair": ("Pair diagnosis, corpus Qwen1.5-0.5B H100 -> MI300X", "porter diagnose", "TraceLens 3 cmds"),
              "pair1M": ("Pair diagnosis, replicated Qwen pairs", "porter diagnose", "TraceLens 3 cmds"),
              "ingest": ("Ingest one trace (whole process)", "porter ingest", "HTA TraceAnalysis")}
    for name, (title, ours, peer) in titles.items():
        if name in parts:
            block += [f"### {title}", "", *header(parts[name]),
                      *comparison_table(parts[name], ours, peer, "porter vs peer"), ""]
    if "read" in parts:
        block += ["### Reading alone vs the bare parse (in process, imports excluded; replicated H100 Qwen trace)", "",
                  *header(parts["read"]), *simple_table(parts["read"], ref="read: orjson"), ""]
    if "scale" in parts:
        st, data = stats_of(parts["scale"]["runs"]), parts["scale"]["data"]
        block += ["### Pair diagnosis against events (replicated Qwen pairs, whole process)", "",
                  *header(parts["scale"]), *simple_table(parts["scale"]), "",
                  "![porter diagnose time vs events](benchmarks/diagnose_scaling.svg)", ""]
        # CPU seconds, not wall: on a shared machine wall time is mostly waiting for a core.
        plot_stats = {(f"pair {label}", task): {"wall_med": v["cpu_med"]} for (label, task), v in st.items() if v["ok"]}
        plot_facts = {f"pair {label}": {"events": _events(data, label)} for label in data}
        if "read" in parts:
            rdata = parts["read"]["data"]
            for (label, task), v in stats_of(parts["read"]["runs"]).items():
                plot_stats[(f"trace {label}", task.removeprefix("read: ") + " read (1 trace)")] = {"wall_med": v["cpu_med"]}
                plot_facts[f"trace {label}"] = {"events": _events(rdata, label)}
        for name in ("pair", "pair1M"):  # TraceLens's three commands (and porter) on the compared pairs
            for (label, task), v in stats_of(parts.get(name, {}).get("runs", [])).items():
                if v["ok"]:
                    plot_stats.setdefault((f"pair {label}", task), {"wall_med": v["cpu_med"]})
                    plot_facts.setdefault(f"pair {label}", {"events": _events(parts[name]["data"], label)})
        svg(plot_stats, plot_facts, sorted(plot_facts, key=lambda k: plot_facts[k]["events"]),
            ("porter diagnose", "TraceLens 3 cmds", "porter read (1 trace)", "orjson read (1 trace)"),
            REPO / "benchmarks" / "diagnose_scaling.svg",
            title="CPU s vs events: pair diagnosis (whole process), reading one trace")
    write_markdown("\n".join(block), "diagnose")
    print("wrote BENCHMARKS.md (diagnose), benchmarks/diagnose_scaling.svg", flush=True)


# ---------------------------------------------------------------- main

def compile_bytecode() -> None:
    """Byte-compile porter's packages once before timing, as `pip install` does for a user:
    with PYTHONDONTWRITEBYTECODE set (as in this workspace) an editable checkout would
    otherwise recompile ~60 modules from source in every timed process (~0.3 s CPU),
    while the peers' installed wheels load their compiled bytecode."""
    import compileall

    for pkg in ("porter", "profilers", "reports"):
        compileall.compile_dir(str(REPO / pkg), quiet=1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Whole-process porter vs TraceLens and HTA")
    ap.add_argument("--part", action="append", choices=("pair", "ingest", "read", "scale", "pair1M"), default=[])
    ap.add_argument("--report", action="store_true", help="write BENCHMARKS.md and the plot from saved parts")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES), help="replica sizes for read and scale")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per whole task (TraceLens's three commands together)")
    args = ap.parse_args(argv)
    if args.part:
        compile_bytecode()
    for part in args.part:
        info = {"machine": machine(), "versions": versions(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="minutes"),
                "command": f"python benchmarks/diagnose.py --part {part}" + (f" --repeats {args.repeats}" if args.repeats != 3 else "")
                + (f" --sizes {' '.join(args.sizes)}" if part in ("read", "scale", "pair1M") and args.sizes != list(SIZES) else "")
                + f" --timeout {args.timeout:g}"}
        print(f"== {part}", flush=True)
        if part == "pair":
            runs, data = part_pair(["qwen"], args.repeats, max(1, args.repeats - 1), args.timeout)
        elif part == "pair1M":
            runs, data = part_pair([x for x in args.sizes if x != "2.7M"], 1, 1, args.timeout)
        elif part == "ingest":
            runs, data = part_ingest(args.repeats, args.timeout)
        elif part == "read":
            runs, data = part_read(args.sizes, args.timeout)
        else:
            runs, data = part_scale(args.sizes, args.timeout)
        info["load_end"] = os.getloadavg()[0]
        CACHE.mkdir(parents=True, exist_ok=True)
        # pair1M and scale keep one file per size list, so sizes can be run (and rerun) apart
        name = f"{part}_{'_'.join(args.sizes)}" if part in ("pair1M", "scale") and args.sizes != list(SIZES) else part
        (CACHE / f"diagnose_{name}.json").write_text(json.dumps({"info": info, "data": data, "runs": [asdict(r) for r in runs]}, indent=1))
    if args.report:
        report()


if __name__ == "__main__":
    main()
