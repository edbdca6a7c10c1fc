"""Mutation fuzzing of every reader, from the real trace corpus, in a subprocess pool.

    python tests/fuzz.py --cases 20000 --workers 2 [--save crashes/]

Each case takes one seed trace (every corpus file a registered reader detects, cut down to
a few hundred events where its format has a cut, or whole; and the repo's fixture traces),
damages it with tests/mutation.py (JSON as a document, SQLite as tables, XSpace as a
message, any of them as bytes), ingests it into a scratch directory, and groups the bundle
every way `porter show` can, cutting each key as the terminal and the reports show it.
Porter's promise: the bundle is written, or a PorterError says what is wrong in one line
naming the file. Anything else is counted: a crash (another exception, by signature), a hang
(the watchdog kills the worker after --timeout s of its CPU time, which other jobs on the
machine do not inflate, or four times that of wall time), a memory blow-up (MemoryError under
the --memory-mb address-space limit, or a worker killed), or a bad message (more than one
line, or the file not named). Case N is seeded with N, so
`--only N` replays it, and --save keeps each failing input.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import multiprocessing as mp
import os
import random
import resource
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import orjson  # noqa: E402

from mutation import SQLITE_MAGIC, Pick, mutate_bytes, mutate_json, mutate_sqlite, mutate_xspace, regzip  # noqa: E402

SEED_EVENTS = 40  # events kept per Kineto category in a cut-down seed
SEED_RECORDS = 120  # records kept per rocprofv3 table


@dataclass(frozen=True)
class Seed:
    name: str
    data: bytes  # uncompressed
    suffix: str  # file name ending the reader expects
    gzipped: bool
    is_json: bool
    fmt: str = ""  # the reader that detected it


def _cut_kineto(doc: dict) -> dict:
    """The first SEED_EVENTS events of each category, in trace order, with every metadata event."""
    seen: collections.Counter = collections.Counter()
    keep = []
    for ev in doc.get("traceEvents", []):
        cat = ev.get("cat") if isinstance(ev, dict) else None
        if cat is None or seen[cat] < SEED_EVENTS:
            keep.append(ev)
            seen[cat] += 1
    return dict(doc, traceEvents=keep)


def _cut_rocprof(doc: dict) -> dict:
    proc = dict(doc["rocprofiler-sdk-tool"][0])
    records = {k: v[:SEED_RECORDS] for k, v in proc["buffer_records"].items()}
    used = {r["dispatch_info"]["kernel_id"] for r in records.get("kernel_dispatch", [])}
    proc["buffer_records"] = records
    proc["kernel_symbols"] = [s for s in proc["kernel_symbols"] if s["kernel_id"] in used]
    return {"rocprofiler-sdk-tool": [proc]}


SKIP_DIRS = {"LICENSES", "reference"}  # the corpus's licence texts and a peer tool's CSV output


def _suffix(path: Path) -> str:
    """The file name's ending a reader may look at ('.json.gz', '.xplane.pb', '.sqlite')."""
    parts = path.name.split(".")
    return "." + ".".join(parts[-2:]) if len(parts) > 2 else path.suffix


CUTS = {"kineto": lambda doc: _cut_kineto(doc), "rocprofv3": lambda doc: _cut_rocprof(doc)}


def seed_of(path: Path, formats: dict) -> Seed | None:
    """`path` as a seed when a registered reader takes it (detected as `porter ingest` does),
    cut down when its format has a cut; None for a file no reader reads."""
    from porter.core.errors import PorterError
    from profilers.detect import detect

    try:
        fmt = detect(path)
    except PorterError:
        return None
    if fmt not in formats:
        return None
    raw = path.read_bytes()
    gzipped = raw[:2] == b"\x1f\x8b"
    data = gzip.decompress(raw) if gzipped else raw
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return Seed(path.name, data, _suffix(path), gzipped, False, fmt)
    cut = CUTS.get(fmt)
    return Seed(path.name, orjson.dumps(cut(doc)) if cut else data, _suffix(path), gzipped, True, fmt)


def seeds(corpus: Path) -> list[Seed]:
    """Every corpus file a registered reader reads (cut down where its format has a cut), and
    the repo's fixture traces. Found by detection, not by format: a reader registered later
    (profilers/__init__.py READER_MODULES) gets its corpus files fuzzed without a change here."""
    from profilers.detect import readers

    formats = readers()
    files = [f for f in sorted(corpus.rglob("*")) if f.is_file() and not SKIP_DIRS & set(f.relative_to(corpus).parts)
             and f.name != "README.md"]
    files += sorted(f for f in (REPO / "fixtures").iterdir() if f.is_file() and f.name.endswith((".pb", ".json", ".json.gz")))
    out = []
    for path in files:
        seed = seed_of(path, formats)
        if seed is not None:
            out.append(seed)
    return out


def make_case(seed: Seed, number: int) -> bytes:
    """The damaged file for case `number` (deterministic): JSON damaged as a document, an
    SQLite database as tables, an XSpace as a message, each half the time by bytes instead."""
    pick = Pick(rng=random.Random(number))
    if seed.is_json:
        data = mutate_json(seed.data, pick)
    elif seed.data.startswith(SQLITE_MAGIC):
        data = mutate_sqlite(seed.data, pick) if pick.int(0, 1) else mutate_bytes(seed.data, pick)
    else:  # protobuf: half byte damage, half damage to the parsed message
        data = mutate_xspace(seed.data, pick) if pick.int(0, 1) else mutate_bytes(seed.data, pick)
    return regzip(data, pick) if seed.gzipped else data


@dataclass
class Outcome:
    number: int
    seed: str
    kind: str  # ok | error | crash | memory | bad-message | hang | died
    detail: str = ""


def _signature(exc: BaseException) -> str:
    """Exception type and the innermost frame in porter's own code."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if str(REPO) in f.filename and "/tests/" not in f.filename]
    where = f"{Path(frames[-1].filename).relative_to(REPO)}:{frames[-1].name}" if frames else "?"
    return f"{type(exc).__name__} in {where}: {str(exc)[:120]}"


def grouped(bundle: Path) -> None:
    """What `porter show` and the tables of `porter diagnose` do with a bundle: every grouping,
    and each shown key as the terminal and the reports cut it."""
    from porter.analysis.views import GROUPINGS, time_by
    from porter.bundles.bundle import load_bundle
    from porter.core.units import DISPLAY_CHARS, elide
    from reports.render import html_breakable, md_code

    b = load_bundle(bundle)
    for by in GROUPINGS:
        for key in time_by(b.ops, b.kernels, by)["key"].head(20):
            cells = (elide(str(key)), md_code(key), html_breakable(key))
            assert all(len(c) <= 10 * DISPLAY_CHARS for c in cells), f"{by} key shown whole: {len(str(key))} chars"


def run_case(seeds_: list[Seed], number: int, scratch: Path) -> Outcome:
    from porter.core.errors import PorterError
    from porter.bundles.ingest import ingest

    seed = seeds_[number % len(seeds_)]
    case_dir = Path(tempfile.mkdtemp(dir=scratch))
    path = case_dir / f"case{number}{seed.suffix}"
    try:
        path.write_bytes(make_case(seed, number))
        grouped(ingest(path, case_dir / "out"))
        return Outcome(number, seed.name, "ok")
    except PorterError as exc:
        message = str(exc)
        if "\n" in message or "\r" in message or str(path) not in message:
            return Outcome(number, seed.name, "bad-message", message[:300])
        return Outcome(number, seed.name, "error", message[len(str(path)) + 2:][:60])
    except MemoryError as exc:
        return Outcome(number, seed.name, "memory", _signature(exc))
    except Exception as exc:  # noqa: BLE001 - every other exception is what we are counting
        return Outcome(number, seed.name, "crash", _signature(exc))
    finally:
        shutil.rmtree(case_dir, ignore_errors=True)


def _mapped_bytes() -> int:
    """This process's virtual size (VmSize), the base a worker's address-space limit adds to."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) << 10
    return 0


def _worker(seeds_: list[Seed], conn, memory_mb: int, scratch: Path) -> None:
    if memory_mb:  # memory_mb beyond what the forked parent already maps (torch, jax in a test run);
        # negative: below it, so every new mapping fails (the test that the limit binds)
        limit = max(_mapped_bytes() + memory_mb * (1 << 20), 1 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        number = conn.recv()
        if number is None:
            return
        conn.send(run_case(seeds_, number, scratch))


WALL_FACTOR = 4
_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15 of stat(5)


class Pool:
    """Worker processes fed one case at a time; the parent is the watchdog."""

    def __init__(self, seeds_: list[Seed], workers: int, timeout: float, memory_mb: int, scratch: Path):
        self.args = (seeds_, memory_mb, scratch)
        self.timeout = timeout
        self.ctx = mp.get_context("fork")  # the workers share the parent's imports
        self.slots: list[list] = [self._start() for _ in range(workers)]  # [process, conn, case, started]

    def _start(self) -> list:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(self.args[0], child, *self.args[1:]), daemon=True)
        proc.start()
        child.close()
        return [proc, parent, None, 0.0, 0.0]  # process, pipe, case, wall and CPU clock at its start

    def run(self, numbers: list[int], seeds_: list[Seed], report) -> None:
        todo = collections.deque(numbers)
        busy = 0
        while todo or busy:
            for i, slot in enumerate(self.slots):
                proc, conn, case, started, cpu_started = slot
                if case is None and todo:
                    slot[2], slot[3], slot[4] = todo.popleft(), time.monotonic(), _cpu_seconds(proc.pid)
                    busy += 1
                    try:
                        conn.send(slot[2])
                    except OSError:  # the worker died before taking it (e.g. at start, under the memory limit)
                        pass  # seen as not alive below
                    continue
                if case is None:
                    continue
                seed = seeds_[case % len(seeds_)].name
                if (over := self._over(proc.pid, started, cpu_started)) is not None:  # first: a result
                    report(Outcome(case, seed, "hang", over))  # that came too late is still a hang
                    self.slots[i] = self._replace(slot)
                    busy -= 1
                elif conn.poll(0.01):
                    try:
                        report(conn.recv())
                    except EOFError:
                        report(Outcome(case, seed, "died", f"exit code {proc.exitcode}"))
                        self.slots[i] = self._replace(slot)
                    else:
                        slot[2] = None
                    busy -= 1
                elif not proc.is_alive():
                    report(Outcome(case, seed, "died", f"exit code {proc.exitcode}"))
                    self.slots[i] = self._replace(slot)
                    busy -= 1

    def _over(self, pid: int, started: float, cpu_started: float) -> str | None:
        """Why the case counts as a hang, or None: over --timeout s of the worker's CPU time
        (descheduling beside other jobs does not inflate it), or WALL_FACTOR times that of
        wall time (a worker blocked without spinning)."""
        if time.monotonic() - started > WALL_FACTOR * self.timeout:
            return f"over {WALL_FACTOR * self.timeout:.0f} s of wall time"
        if _cpu_seconds(pid) - cpu_started > self.timeout:
            return f"over {self.timeout:.0f} s of CPU time"
        return None

    def _replace(self, slot: list) -> list:
        slot[0].kill()
        slot[0].join()
        slot[1].close()
        return self._start()

    def close(self) -> None:
        for proc, conn, *_ in self.slots:
            try:
                conn.send(None)
            except OSError:
                pass
            proc.join(5)
            if proc.is_alive():
                proc.kill()


FAILURES = ("crash", "memory", "bad-message", "hang", "died")


def fuzz(cases: int, workers: int = 2, timeout: float = 30.0, memory_mb: int = 3072, start: int = 0,
         save: Path | None = None, corpus: Path | None = None, only: list[int] | None = None,
         progress_every: int = 0) -> dict:
    """Run the cases; returns counts per outcome kind and the failing outcomes."""
    corpus = corpus or Path(os.environ.get("PORTER_TRACE_CORPUS", REPO.parent / "shared" / "traces"))
    seeds_ = seeds(corpus)
    import porter.analysis.views  # noqa: F401 - imported once, before the fork (ingest, grouping, display)
    import porter.bundles.ingest  # noqa: F401
    import reports.render  # noqa: F401
    from profilers.detect import readers

    readers()  # every reader module too: workers fork with them loaded
    numbers = only or list(range(start, start + cases))
    counts: collections.Counter = collections.Counter()
    failures: list[Outcome] = []

    def report(o: Outcome) -> None:
        counts[o.kind] += 1
        done = sum(counts.values())
        if progress_every and done % progress_every == 0:
            print(f"{done} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=sys.stderr, flush=True)
        if o.kind in FAILURES:
            failures.append(o)
            print(f"case {o.number} ({o.seed}): {o.kind}: {o.detail}", file=sys.stderr, flush=True)
            if save:
                save.mkdir(parents=True, exist_ok=True)
                seed = seeds_[o.number % len(seeds_)]
                (save / f"case{o.number}{seed.suffix}").write_bytes(make_case(seed, o.number))

    with tempfile.TemporaryDirectory(prefix="porter-fuzz-") as scratch:
        pool = Pool(seeds_, workers, timeout, memory_mb, Path(scratch))
        try:
            pool.run(numbers, seeds_, report)
        finally:
            pool.close()
    return {"counts": dict(counts), "failures": failures, "seeds": len(seeds_)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--start", type=int, default=0, help="first case number")
    ap.add_argument("--only", type=int, nargs="*", help="replay these case numbers")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=30.0, help="CPU seconds before a case counts as a hang")
    ap.add_argument("--memory-mb", type=int, default=3072, help="address-space limit per worker (0: none)")
    ap.add_argument("--save", type=Path, help="write each failing input here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    got = fuzz(args.cases, args.workers, args.timeout, args.memory_mb, args.start, args.save, only=args.only,
               progress_every=1000)
    counts = got["counts"]
    total = sum(counts.values())
    print(f"{total} cases from {got['seeds']} seed traces in {time.perf_counter() - t0:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    signatures = collections.Counter(f"{o.kind}: {o.detail}" for o in got["failures"])
    for sig, n in signatures.most_common():
        print(f"  {n:5d}  {sig}")
    return 1 if got["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
