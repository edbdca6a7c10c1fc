"""What a report shows, independent of how diagnosis.json spells it.

reports.build.load_report_model() is the one adapter from diagnosis.json to these
dataclasses; templates and charts read only these, so a renamed diagnosis field is a
one-line change in the adapter, not a hunt through templates.

Times are microseconds of device time; a ratio is target time / source time
(above 1 means the target is slower).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Estimate:
    """A figure as the report shows it: a value and its bounds (an interval, a range or the IQR; `kind` says
    which). Not porter.core.samples.Samples, which holds the repeats themselves."""

    value: float
    lo: float | None = None
    hi: float | None = None
    samples: int | None = None
    kind: str = ""  # what lo/hi are: "min-max", "IQR", "p10-p90"; "" when unknown


@dataclass(frozen=True)
class Side:
    """One run: the source or the target."""

    label: str
    device_name: str
    device_type: str
    stack: str
    profiler: str
    versions: dict[str, str]
    timing: str  # how its time was measured, in words
    total_us: float  # whole trace
    steps: int = 0  # profiled steps in the trace (0: unknown)


class Gap:
    """Gap and ratio of a row that has source_us and target_us (target - source; target / source)."""

    source_us: float
    target_us: float

    @property
    def gap_us(self) -> float:
        return self.target_us - self.source_us

    @property
    def ratio(self) -> float | None:
        """None where either side has no time: a class the target never ran (XLA decomposes a
        softmax) is not a 0.00x speed-up."""
        return self.target_us / self.source_us if self.source_us > 0 and self.target_us > 0 else None


@dataclass(frozen=True)
class TimeRow(Gap):
    """Device time of one group (op class, module, op or matched group) on both sides."""

    key: str
    source_us: float
    target_us: float
    roofline_us: float | None = None  # best time the target's hardware allows, when known
    roofline_observed: bool = False  # the target beat its ceiling here: the roofline is its observed time
    op_class: str = ""
    module: str = ""
    gross_loss_us: float | None = None  # op classes: the gaps of the slower op shapes, summed
    gross_win_us: float | None = None  # and of the faster ones (negative); loss + win = gap
    within_noise: bool = False  # a live pair's gap interval holds zero, or alone timing did not bear it out
    runtime: bool = False  # the root's row holds only the runtime (porter.analysis.outside.runtime_step)
    # per step, each module's alone timing where --confirm sized it (porter.pipeline.confirmation.ranked_gaps)
    ranked_source_us: float | None = None
    ranked_target_us: float | None = None

    @property
    def roofline_distance(self) -> float | None:
        """How many times slower than its roofline the target runs this group (>= 1: a target
        faster than its ceiling makes its observed time the roofline, roofline_observed)."""
        if self.roofline_us is None or not self.roofline_us > 0:
            return None
        return self.target_us / self.roofline_us


@dataclass(frozen=True)
class ConfirmedRow:
    """A suspect module re-timed alone on both stacks (diagnosis.json `confirmed`), beside its
    profiled gap per step; gaps in us, intervals 95%."""

    module: str
    profiled_gap_us: float | None
    profiled_low_us: float | None
    profiled_high_us: float | None
    alone_gap_us: float | None
    alone_low_us: float | None
    alone_high_us: float | None
    verdict: str  # confirmed, opposite sign alone, within noise alone, not sized alone, or why it was not replayed


@dataclass(frozen=True)
class TriedRow:
    """One recipe `porter diagnose --tune` applied to the target (diagnosis.json `tried`):
    the fix plan's estimate beside the measured recovery per forward (us, 95% interval)."""

    recipe: str
    fix_id: str
    estimated_us: float | None
    recovered_us: float | None
    low_us: float | None
    high_us: float | None
    rel_l2: float | None
    kept: bool
    why: str

    @property
    def measured_over_estimated(self) -> float | None:
        """The estimate's calibration for this recipe (None without an estimate or a measurement)."""
        if self.recovered_us is None or not self.estimated_us:
            return None
        return self.recovered_us / self.estimated_us


@dataclass(frozen=True)
class OpCallRow(Gap):
    """One op call of a live pair, paired by identity (module, op, call index; porter.analysis.op_calls)."""

    module: str
    op: str
    call: int
    evidence: str  # identity-call, fused-share, source-only or target-only
    source_us: float
    target_us: float
    estimated_us: float = 0.0  # of target_us, the part placed by estimate (a fusion's share), per step


@dataclass(frozen=True)
class OpShapeRow(Gap):
    """One (framework op, input shapes, dtypes) aggregated over its calls on each side."""

    op: str
    shapes: str  # compact JSON, '' when the trace recorded none
    dtypes: str  # short ('bf16'; 'fp32,bf16' for a cast)
    op_class: str
    source_count: int
    target_count: int
    source_us: float
    target_us: float
    efficiency: float | None = None  # target roofline time / target time, when costs are known (<= 1)
    module_kinds: tuple[str, ...] = ()
    observed: bool = False  # some calls beat the ceiling: their observed time is the bound
    target_ops: tuple[str, ...] = ()  # what ran for the op on the target, where it names it otherwise (dot_general)

    @property
    def ratio(self) -> float | None:
        """None on one side only: a row the target never ran is not a 0.00x speed-up."""
        return self.target_us / self.source_us if self.source_us > 0 and self.target_count else None

    @property
    def only_on(self) -> str:
        """'only on source' / 'only on target' for a one-sided row, else ''."""
        return "only on source" if not self.target_count else "only on target" if not self.source_count else ""

    @property
    def source_mean_us(self) -> float | None:
        return self.source_us / self.source_count if self.source_count else None

    @property
    def target_mean_us(self) -> float | None:
        return self.target_us / self.target_count if self.target_count else None


@dataclass(frozen=True)
class AccuracyRow:
    """Error of one module's output on the target vs the source, in model order."""

    module: str
    local: float | None  # module fed the source's inputs: error it introduces itself
    propagated: float | None  # end-to-end target run: error accumulated up to here
    tolerance: float | None = None
    introduces: bool = False  # local error above tolerance: this module adds loss


@dataclass(frozen=True)
class Accuracy:
    metric: str  # e.g. "relative L2"
    verdict: str  # one line: "within tolerance", "fails: ..."
    passed: bool | None
    tolerance_note: str  # which tolerance and why
    rows: list[AccuracyRow]
    op_paths: list[str] = field(default_factory=list)  # "model > module > op ..." per module that introduces error
    not_compared: list[tuple[str, str]] = field(default_factory=list)  # (module, why) incl. modules without a local error
    precision: list[str] = field(default_factory=list)  # a precision port: its dtypes, rule and verdicts

    @property
    def headline(self) -> str:
        """A few words for a summary card; the verdict sentence goes beneath it."""
        if self.passed is None:
            return "not judged"
        return "within tolerance" if self.passed else "outside tolerance"


@dataclass(frozen=True)
class Fix:
    title: str
    where: str
    why: str
    first_step: str
    effort_days: tuple[float, float]
    recoverable_us: float | None
    confidence: str
    kind: str = "time"  # "time" or "accuracy"
    category: str = ""  # op classes it applies to
    group_ids: tuple[str, ...] = ()  # matched groups it applies to (fixes are alternatives per group)
    rank: int = 0  # diagnosis.json rank, within its kind
    closes_us: float | None = None  # what it closes of its groups' measured gap to the source
    beyond_us: float | None = None  # what it claims beyond parity: headroom to the target's own ceiling
    headroom: bool = False  # found as headroom (the target is not slower there by the fix's measure)
    in_plan: bool = False  # one of the fixes the plan sums
    alternative_to: tuple[int, ...] = ()  # the plan fixes that already cover some of its groups
    plain_title: str = ""  # the catalogue's title, no op or module named (the leadership summary)

    @property
    def marker(self) -> str:
        """Why it is or is not summed into the plan, in a few words."""
        if self.kind == "accuracy":
            return "accuracy"
        text = ("in plan" if self.in_plan else "alternative to " + ", ".join(f"#{r}" for r in self.alternative_to)
                if self.alternative_to else "not in plan")
        return text + (", headroom" if self.headroom else "")


@dataclass(frozen=True)
class Plan:
    """diagnosis.json `plan`: the time fixes that add up, and their sums (porter.analysis.plan)."""

    ranks: tuple[int, ...]
    total_us: float  # what the listed fixes close of the measured gap, summed
    beyond_us: float  # what they claim beyond parity, summed (not in total_us)
    days: tuple[float, float]  # their effort ranges, summed
    provisional: str | None = None  # the headline's advice: too uncertain to plan on yet


@dataclass(frozen=True)
class Note:
    """A portability finding: an op that did not run, fell back, or found no partner."""

    kind: str  # "unmatched on source", "unmatched on target", "fell back", "did not run"
    name: str
    where: str
    source_us: float | None
    target_us: float | None
    detail: str = ""


@dataclass(frozen=True)
class PortabilityRow:
    """An op of the model the target stack runs badly (porter ops): fell back, unsupported,
    numerically off, or decomposed into many ops; with its cost from the fix catalogue."""

    op: str
    status: str
    label: str  # status, with what it decomposes into
    where: str  # module paths
    calls: int
    evidence: str
    predicted: str  # what the registries predicted
    fix: str  # catalogue fix title, tier and days ("" when none)
    time_share: float | None  # the op's share of the target's time


@dataclass
class ReportModel:
    model: str
    mode: str  # "trace" (recorded traces) or "live" (porter ran the model)
    source: Side
    target: Side
    ratio: Estimate  # end-to-end target / source
    coverage: float | None  # share of target device time matched to source ops
    by_class: list[TimeRow]
    by_module: list[TimeRow]
    top_gaps: list[TimeRow]  # matched groups
    accuracy: Accuracy | None
    fixes: list[Fix]
    notes: list[Note]
    method: list[tuple[str, str]]  # (what, how it was measured)
    command: str  # the command that reproduces the diagnosis
    created_at: str = ""
    porter_version: str = ""
    warnings: list[str] = field(default_factory=list)
    by_module_kind: list[TimeRow] = field(default_factory=list)
    wall_ratio: float | None = None  # target / source median step wall time (live captures)
    by_op_shape: list[OpShapeRow] = field(default_factory=list)  # largest absolute gap first
    portability: list[PortabilityRow] = field(default_factory=list)  # porter ops on the target (diagnose --ops)
    portability_summary: str = ""
    source_coverage: float | None = None  # share of source time matched to target ops
    split_share: dict[str, float] = field(default_factory=dict)  # side -> share of its time split among modules by estimate
    measured_split_share: dict[str, float] = field(default_factory=dict)  # side -> share split by the other side's measured op-call times
    outside_share: dict[str, float] = field(default_factory=dict)  # side -> share of its time outside every module, unpaired (in coverage's denominator)
    outside_kinds: dict[str, dict[str, float]] = field(default_factory=dict)  # side -> {what it is: share of the side's time}
    runtime_step_us: dict[str, float] = field(default_factory=dict)  # side -> its runtime per step, time between ops included (live)
    op_calls: list[OpCallRow] = field(default_factory=list)  # live pairs: per op call, largest |gap| first
    confirmed: list[ConfirmedRow] = field(default_factory=list)  # live pairs with --confirm: suspects alone
    profiled_ratio: float | None = None  # live pairs: the profiled steps' ratio (where the time goes), beside the headline
    ratio_basis: str = ""  # what the headline ratio was measured on (diagnosis.json headline.basis)
    ratio_advice: str | None = None  # what to do when the headline's interval is too wide to plan on
    profiler_overhead: dict[str, float] = field(default_factory=dict)  # live: side -> profiled / unprofiled step
    plan: Plan | None = None  # None: a diagnosis.json from before porter wrote plans
    tried: list[TriedRow] = field(default_factory=list)  # diagnose --tune: each recipe measured on the target
    tried_best: str = ""  # the best combination, one line ("" when nothing was kept)

    @property
    def excess_us(self) -> float:
        """How much more device time the target spends than the source (0 when it spends less)."""
        return max(self.target.total_us - self.source.total_us, 0.0)

    @property
    def time_fixes(self) -> list[Fix]:
        return [f for f in self.fixes if f.kind != "accuracy"]

    def counted_fixes(self) -> list[Fix]:
        """The time fixes the plan sums (diagnosis.json plan.fixes), in rank order."""
        ranks = set(self.plan.ranks) if self.plan else set()
        return [f for f in self.time_fixes if f.rank in ranks]

    @property
    def recoverable_us(self) -> float:
        """What the plan's fixes close of the measured gap together (plan.total_us)."""
        return self.plan.total_us if self.plan else 0.0

    @property
    def beyond_parity_us(self) -> float:
        return self.plan.beyond_us if self.plan else 0.0

    @property
    def effort_days(self) -> tuple[float, float]:
        """Engineer-days of the plan's fixes (plan.days): the sum of the fixes it lists."""
        return self.plan.days if self.plan else (0.0, 0.0)

    @property
    def projected_ratio(self) -> float | None:
        """End-to-end ratio once every ranked time fix lands (an estimate, not a measurement).
        Live pairs: the headline times the share of the target's profiled time that remains,
        since the profiled totals carry each stack's profiler overhead."""
        if self.source.total_us <= 0:
            return None
        if self.profiled_ratio is not None and self.target.total_us > 0 and self.ratio.value == self.ratio.value:
            return self.ratio.value * max(self.target.total_us - self.recoverable_us, 0.0) / self.target.total_us
        return (self.target.total_us - self.recoverable_us) / self.source.total_us

    @property
    def unmatched_target_us(self) -> float:
        return sum(n.target_us or 0.0 for n in self.notes if n.kind == "unmatched on target")
