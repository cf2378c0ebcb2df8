"""Candidate vs baseline: run-level statistics and decisions.

The unit of replication is the run: a 3 % drift between runs would make a test over pooled
requests raise false alarms most of the time. Each run is reduced to one value per *figure*
(e.g. `ttft.p99`: that run's TTFT p99; `output_throughput`: that run's output tokens per second);
the candidate's runs are compared with the baseline's runs:

- ratio = mean over candidate runs / mean over baseline runs;
- its confidence interval: percentile bootstrap, resampling runs within each side with
  replacement (`n_boot` draws, seeded);
- p-value: two-sided Mann–Whitney U on the run values (exact for small samples); Welch's t-test
  on log values is reported too;
- decision, with `practical` the smallest relative change that matters (profile `ab.practical`;
  for latencies the band is at least `practical_ms` milliseconds, `ab.practical_ms`, because 5 %
  of a 4 ms TTFT is below what a step-based engine can resolve and matters to nobody):
    regressed / improved  p < alpha, the interval excludes 1, and the ratio moved by at least
                          `practical` in the bad / good direction (lower is better for latencies,
                          higher for throughputs);
    no change             otherwise, when the whole interval lies within 1 ± practical;
    inconclusive          otherwise (the data cannot rule out a change that matters).
The verdict of an A/B run reads several figures (`ab.decide_on`), so each figure is tested at
alpha divided by their number (Bonferroni); with 5 runs a side, a complete separation of the two
sides gives p = 0.0079, which still passes 0.05 / 5.
With one run per side no run-level statistic exists: the interval then comes from resampling
requests and the decision says "single run". A figure one side does not have reads "n/a".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from loadgate.core import figures as registry
from loadgate.core.figures import Figure, ab_figures, ab_path, read_path
from loadgate.jsonutil import clean
from loadgate.records import Record

Decision = Literal["improved", "regressed", "no change", "inconclusive", "single run", "n/a"]

def figures() -> dict[str, Figure]:
    """The A/B figures (`ttft.p50`, `output_throughput`, …), derived from the figure registry."""
    return ab_figures()


def unit_of(name: str) -> str:
    return ab_figures()[name].unit


def figure(level_summary: Any, name: str) -> float | None:
    """An A/B figure's value in one level summary; None where absent or not finite."""
    x = read_path(level_summary, ab_path(name))
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


@dataclass(frozen=True)
class FigureComparison:
    figure: str
    baseline: list[float]
    candidate: list[float]
    ratio: float | None
    ci: tuple[float, float] | None
    p_mannwhitney: float | None
    p_welch_log: float | None
    decision: Decision
    higher_is_better: bool

    def words(self, label_a: str = "baseline", label_b: str = "candidate") -> str:
        """e.g. 'candidate output_throughput 1.31 × (1.27–1.35) of baseline: improved'."""
        if self.ratio is None:
            return f"{label_b} {self.figure}: n/a"
        ci = f" ({self.ci[0]:.3f}–{self.ci[1]:.3f})" if self.ci else ""
        return f"{label_b} {self.figure} {self.ratio:.3f} ×{ci} of {label_a}: {self.decision}"


def _bootstrap_ratio(a: np.ndarray, b: np.ndarray, n_boot: int, conf: float, rng: np.random.Generator) -> tuple[float, float]:
    ia = rng.integers(0, a.size, size=(n_boot, a.size))
    ib = rng.integers(0, b.size, size=(n_boot, b.size))
    ma, mb = a[ia].mean(axis=1), b[ib].mean(axis=1)
    ok = ma > 0
    ratios = mb[ok] / ma[ok]
    lo, hi = np.percentile(ratios, [100 * (1 - conf) / 2, 100 * (1 + conf) / 2])
    return float(lo), float(hi)


def compare_figure(name: str, a: Sequence[float | None], b: Sequence[float | None], *, alpha: float = 0.05,
                   practical: float = 0.05, practical_ms: float = 0.0, confidence: float = 0.95,
                   n_boot: int = 4000, seed: int = 0) -> FigureComparison:
    known = ab_figures()
    higher = known[name].better == "higher" if name in known else False
    av = np.array([x for x in a if x is not None], dtype=np.float64)
    bv = np.array([x for x in b if x is not None], dtype=np.float64)
    if av.size == 0 or bv.size == 0 or av.mean() <= 0:  # e.g. acceptance length without speculation
        return FigureComparison(name, av.tolist(), bv.tolist(), None, None, None, None, "n/a", higher)
    ratio = float(bv.mean() / av.mean())
    rng = np.random.default_rng(seed)
    if av.size < 2 or bv.size < 2:
        return FigureComparison(name, av.tolist(), bv.tolist(), ratio, None, None, None, "single run", higher)
    from scipy import stats as sps  # here, not at import: every command would pay ~0.8 s for it

    ci = _bootstrap_ratio(av, bv, n_boot, confidence, rng)
    p_mw = float(sps.mannwhitneyu(av, bv, alternative="two-sided", method="auto").pvalue)
    p_t = None
    if (av > 0).all() and (bv > 0).all() and (np.ptp(np.log(av)) > 0 or np.ptp(np.log(bv)) > 0):
        p_t = float(sps.ttest_ind(np.log(av), np.log(bv), equal_var=False).pvalue)
    significant = p_mw < alpha and (ci[0] > 1 or ci[1] < 1)
    worse = ratio < 1 if higher else ratio > 1
    band = practical
    if (known[name].unit if name in known else "ms") == "ms" and practical_ms > 0:  # a latency change below practical_ms never matters
        band = max(practical, practical_ms / float(av.mean()))
    decision: Decision
    if significant and abs(ratio - 1) >= band:
        decision = "regressed" if worse else "improved"
    elif 1 - band <= ci[0] and ci[1] <= 1 + band:
        decision = "no change"
    else:
        decision = "inconclusive"
    return FigureComparison(name, av.tolist(), bv.tolist(), ratio, ci, p_mw, p_t, decision, higher)


def request_level(name: str, a_records: list[Record], b_records: list[Record], *,
                  n_boot: int = 2000, confidence: float = 0.95, seed: int = 0) -> tuple[float, float] | None:
    """Single runs: a bootstrap interval of the figure's ratio from resampling requests (indicative
    only: it ignores run-to-run drift)."""
    if "." not in name:
        return None
    metric, stat = name.split(".")
    q = float(stat[1:])
    fn = registry.figure(metric).samples
    assert fn is not None
    sa = [np.array(fn(r)) for r in a_records if r.succeeded]
    sb = [np.array(fn(r)) for r in b_records if r.succeeded]
    if not sa or not sb:
        return None
    rng = np.random.default_rng(seed)
    out, tried = [], 0
    for _ in range(n_boot // 10):
        pa = np.concatenate([sa[i] for i in rng.integers(0, len(sa), len(sa))])
        pb = np.concatenate([sb[i] for i in rng.integers(0, len(sb), len(sb))])
        if pa.size and pb.size:
            tried += 1
            a, b = float(np.percentile(pa, q)), float(np.percentile(pb, q))
            if a > 0 and math.isfinite(a) and math.isfinite(b):  # a ratio to 0 (a TPOT of one read) is none
                out.append(b / a)
    if not out or len(out) < tried / 2:  # most resamples give no ratio: the interval is unknown, not made up
        return None
    lo, hi = np.percentile(out, [100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2])
    return float(lo), float(hi)


def worst(decisions: Sequence[str]) -> Decision:
    """regressed if any is; else n/a (a deciding figure could not be compared) if any is; else
    inconclusive, single run, improved, in that order; no change only when every one says so.
    Nothing to decide on is n/a: "no change" is never a verdict without evidence."""
    if not decisions:
        return "n/a"
    for d in ("regressed", "n/a", "inconclusive", "single run", "improved"):
        if d in decisions:
            return d
    return "no change"


def overall(comparisons: dict[str, FigureComparison], decide_on: Sequence[str]) -> Decision:
    """The verdict of one load level over the deciding figures (see `worst`). A figure neither side
    has (ITL without streaming, acceptance length without speculation) does not apply and is left
    out; one side without it, or a ratio that cannot be formed, is n/a."""
    applicable = [f for f in decide_on
                  if f not in comparisons or comparisons[f].baseline or comparisons[f].candidate]
    return worst([comparisons[f].decision if f in comparisons and comparisons[f].ratio is not None else "n/a"
                  for f in applicable])


def compare_summaries(a: Sequence[Any], b: Sequence[Any], **kw: Any) -> dict[str, FigureComparison]:
    """Every figure, from per-run level summaries of each side."""
    return {name: compare_figure(name, [figure(s, name) for s in a], [figure(s, name) for s in b], **kw)
            for name in ab_figures()}


def comparisons_json(comps: dict[str, FigureComparison], verdict: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = clean({"verdict": verdict, "figures": {n: {
        "unit": unit_of(n), "baseline_runs": c.baseline, "candidate_runs": c.candidate, "ratio": c.ratio,
        "interval": c.ci, "p_mannwhitney": c.p_mannwhitney, "p_welch_log": c.p_welch_log, "decision": c.decision,
        "higher_is_better": c.higher_is_better, "words": c.words()} for n, c in comps.items()}})
    return out
