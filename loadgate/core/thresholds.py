"""Performance thresholds: small k6-style strings checked against one level summary.

A profile maps a metric name to a list of threshold strings::

    thresholds:
      ttft: ["p(99) < 800ms", "p(50) < 200ms"]
      ttft_error_adjusted: ["p(99) < 1s"]
      errors: ["rate < 1%", "count == 0"]
      output_throughput: ["> baseline * 0.95", "> 1500 tok/s"]

Grammar (whitespace between tokens is ignored)::

    threshold   := [aggregation] comparator operand
    aggregation := "p(" number ")" | "avg" | "mean" | "med" | "min" | "max" | "rate" | "count"
    comparator  := "<" | "<=" | ">" | ">=" | "==" | "!="
    operand     := number [unit] | "baseline" [("*" | "+" | "-") number [unit]]
    number      := digits ["." digits] [exponent] | "." digits [exponent]
    exponent    := ("e" | "E") ["+" | "-"] digits
    unit        := "us" | "ms" | "s" | "%" | "tok/s" | "req/s"

Rules
- Distribution metrics need an aggregation, scalar metrics forbid one; `rate` and `count` are
  for `errors` only (and `errors` needs one of them). `p(N)` reads the summary's `pN` figure,
  so N is one of 50, 90, 95, 99, 99.9. `avg` and `mean` read the mean, `med` reads p50.
- Time units (us, ms, s) are normalized to milliseconds, the summary's unit; a time figure
  written without a unit is in milliseconds. `%` divides by 100 and fits ratios only
  (`errors rate`, `goodput`). `tok/s` and `req/s` fit the throughputs they name. Any other
  unit, or one that does not fit the metric, is an error.
- `baseline` is the same figure of the baseline summary (an A/B run's baseline arm);
  `baseline * k` scales it (k takes no unit, or `%`), `baseline + x` / `baseline - x` shift it
  by x in the metric's own units.
- A figure that is n/a (no samples) fails its threshold, as does `baseline` without a baseline
  summary. A failed request counted as +inf (the `_error_adjusted` latencies) compares as
  infinity, so `p(99) < 1s` fails once more than 1 % of requests failed.
- `==` and `!=` compare with a relative tolerance of 1e-9.
"""

from __future__ import annotations

import difflib
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NoReturn, Protocol

from loadgate.core import figures
from loadgate.core.figures import PERCENTILES
from loadgate.errors import UsageError, one_line


class ThresholdError(UsageError):
    """A threshold that does not parse or names an unknown metric (exit code 2); `reason` is the
    message without the leading `threshold METRIC "TEXT":` (for the profile loader's own prefix)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else message


# Dimensions: which units a figure accepts (factor to the summary's unit) and how it is shown.
_UNITS: dict[str, dict[str, Decimal]] = {
    "time": {"us": Decimal("0.001"), "ms": Decimal(1), "s": Decimal(1000)}, "tok/s": {"tok/s": Decimal(1)},
    "req/s": {"req/s": Decimal(1)}, "ratio": {"%": Decimal("0.01")}, "tokens": {}, "count": {},
}
DISPLAY_UNIT = {"time": "ms", "tok/s": "tok/s", "req/s": "req/s", "ratio": "", "tokens": "tokens", "count": ""}
_ALL_UNITS = sorted({u for units in _UNITS.values() for u in units})


@dataclass(frozen=True)
class _MetricSpec:
    distribution: bool
    dimension: str  # for errors: the dimension of `rate`; `count` is always "count"
    path: tuple[str, ...] = ()  # where a scalar lives in the summary


_DIMENSION = {"ms": "time", "tokens": "tokens", "tok/s": "tok/s", "req/s": "req/s", "ratio": "ratio"}


def _specs() -> dict[str, _MetricSpec]:
    """Every threshold metric, from the figure registry: each distribution (and its error-adjusted
    variant), then each scalar at its summary path."""
    out: dict[str, _MetricSpec] = {}
    for f in figures.FIGURES:
        if f.kind == "distribution":
            out[f.name] = _MetricSpec(True, _DIMENSION[f.unit])
            if f.error_adjusted:
                out[f.name + figures.ADJUSTED] = _MetricSpec(True, _DIMENSION[f.unit])
        else:
            out[f.name] = _MetricSpec(False, _DIMENSION[f.unit], () if f.name == "errors" else f.path)
    return out


def metric_is_distribution(metric: str) -> bool:
    """Whether a threshold metric is a distribution (samples per request, chunk or token)."""
    return _specs()[metric].distribution


def metrics() -> tuple[str, ...]:
    """Every metric a threshold may name, from the figure registry."""
    return tuple(_specs())

_STAT_KEYS = {"avg": "mean", "mean": "mean", "med": "p50", "min": "min", "max": "max"}
_AGGREGATION_WORDS = ("avg", "mean", "med", "min", "max", "rate", "count")
_COMPARATORS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": lambda a, b: math.isclose(a, b, rel_tol=1e-9),
    "!=": lambda a, b: not math.isclose(a, b, rel_tol=1e-9),
}
_TOKEN = re.compile(r"""\s*(?:
    (?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<word>[A-Za-z_]+(?:\s*/\s*[A-Za-z]+)?)
  | (?P<op><=|>=|==|!=|=<|=>|<|>|=|!)
  | (?P<punct>[()*+\-%])
  )""", re.VERBOSE)


@dataclass(frozen=True)
class Threshold:
    """One parsed threshold. `value` is the right-hand side normalized to the summary's unit
    (milliseconds for times, a fraction for `%`); with `baseline` it is None and the right-hand
    side is `baseline <baseline_op> <baseline_operand>` (op and operand None for plain
    `baseline`). `unit` is the unit as written, None when there was none."""

    metric: str
    text: str
    aggregation: str | None  # "p(99)", "avg", "mean", "med", "min", "max", "rate", "count"
    comparator: str
    value: float | None = None
    baseline: bool = False
    baseline_op: str | None = None
    baseline_operand: float | None = None
    unit: str | None = None

    @property
    def stat_key(self) -> str | None:
        """The key of the metric's statistics this threshold reads ("p99", "mean", …)."""
        a = self.aggregation
        if a is None or a in ("rate", "count"):
            return None
        if a.startswith("p("):
            return f"p{float(a[2:-1]):g}"
        return _STAT_KEYS[a]

    @property
    def dimension(self) -> str:
        return "count" if self.aggregation == "count" else _specs()[self.metric].dimension


@dataclass(frozen=True)
class Outcome:
    """A threshold checked against one summary. `limit` is the right-hand side after resolving
    `baseline`; `reason` says why the threshold failed without a comparison (n/a, no baseline)
    or that an infinite figure made it fail."""

    threshold: Threshold
    measured: float | None
    limit: float | None
    passed: bool
    reason: str | None = None


def _or_list(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


class _Parser:
    """Recursive descent over the tokens of one threshold string."""

    def __init__(self, metric: str, text: str) -> None:
        self.metric, self.text = metric, text
        self.tokens: list[tuple[str, str]] = []
        self.i = 0

    def tokenize(self) -> None:
        pos, s = 0, self.text.rstrip()
        while pos < len(s):
            m = _TOKEN.match(s, pos)
            if m is None or m.lastgroup is None:
                self.fail(f"unexpected character {s[pos:].lstrip()[0]!r}")
            value = m.group(m.lastgroup)
            self.tokens.append((m.lastgroup, re.sub(r"\s+", "", value) if m.lastgroup == "word" else value))
            pos = m.end()

    def fail(self, reason: str) -> NoReturn:
        raise ThresholdError(f'threshold {self.metric} "{one_line(self.text)}": {reason}', reason)

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str] | None:
        tok = self.peek()
        self.i += tok is not None
        return tok

    def expect_number(self, what: str) -> Decimal:
        tok = self.take()
        if tok is None or tok[0] != "num":
            self.fail(f"expected {what}, got {_describe(tok)}")
        return Decimal(tok[1])

    def aggregation(self) -> str | None:
        tok = self.peek()
        if tok is None or tok[0] != "word" or tok[1] == "baseline":
            return None
        self.take()
        word = tok[1]
        if word == "p":
            after = self.take()
            if after != ("punct", "("):
                example = after[1] if after is not None and after[0] == "num" else "99"
                self.fail(f"expected '(' after 'p' (write p({example}))")
            q = self.expect_number("a percentile inside p( )")
            if self.take() != ("punct", ")"):
                self.fail("expected ')' to close p(")
            if float(q) not in PERCENTILES:
                self.fail(f"p({q}) is not in summaries (available: "
                          f"{_or_list([f'p({p:g})' for p in PERCENTILES])})")
            return f"p({float(q):g})"
        if word in _AGGREGATION_WORDS:
            return word
        close = difflib.get_close_matches(word, _AGGREGATION_WORDS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        self.fail(f"unknown aggregation {word!r} (expected p(N), {', '.join(_AGGREGATION_WORDS[:-1])} "
                  f"or count){hint}")

    def comparator(self) -> str:
        tok = self.take()
        if tok is not None and tok[0] == "op" and tok[1] in _COMPARATORS:
            return tok[1]
        if tok is not None and tok[0] == "op":
            fix = {"=": "==", "=<": "<=", "=>": ">=", "!": "!="}[tok[1]]
            self.fail(f"{tok[1]!r} is not a comparator (did you mean {fix}?)")
        self.fail(f"expected a comparator (<, <=, >, >=, == or !=), got {_describe(tok)}")

    def unit(self) -> str | None:
        tok = self.peek()
        if tok is not None and (tok[0] == "word" or tok == ("punct", "%")):
            self.take()
            return tok[1]
        return None

    def end(self) -> None:
        tok = self.peek()
        if tok is not None:
            self.fail(f"unexpected {_describe(tok)} after the threshold")


def _describe(tok: tuple[str, str] | None) -> str:
    return "the end" if tok is None else repr(tok[1])


def parse(metric: str, text: str) -> Threshold:
    """Parse one threshold of `metric`; raises ThresholdError with a one-line reason."""
    p = _Parser(metric, text)
    spec = _specs().get(metric)
    if spec is None:
        p.fail(_unknown_metric(metric))
    p.tokenize()
    if not p.tokens:
        p.fail("empty threshold (expected e.g. \"p(99) < 800ms\")")
    aggregation = p.aggregation()
    _check_aggregation(p, spec, aggregation)
    comparator = p.comparator()
    dim = "count" if aggregation == "count" else spec.dimension
    tok = p.peek()
    if tok == ("word", "baseline"):
        p.take()
        op_tok = p.take()
        if op_tok is None:
            p.end()
            return Threshold(metric, text, aggregation, comparator, baseline=True)
        if op_tok[0] != "punct" or op_tok[1] not in "*+-":
            p.fail(f"expected *, + or - after baseline, got {_describe(op_tok)}")
        number = p.expect_number(f"a number after 'baseline {op_tok[1]}'")
        unit = p.unit()
        p.end()
        if op_tok[1] == "*":
            if unit not in (None, "%"):
                p.fail(f"a baseline factor takes no unit (or %), got {unit!r}")
            factor = number / 100 if unit == "%" else number
        else:
            factor = _normalize(p, metric, dim, number, unit)
        return Threshold(metric, text, aggregation, comparator, baseline=True, baseline_op=op_tok[1],
                         baseline_operand=float(factor), unit=unit)
    if tok is None or tok[0] != "num":
        p.fail(f"expected a number or baseline after {comparator}, got {_describe(tok)}")
    number = p.expect_number("a number")
    unit = p.unit()
    p.end()
    return Threshold(metric, text, aggregation, comparator,
                     value=float(_normalize(p, metric, dim, number, unit)), unit=unit)


def _check_aggregation(p: _Parser, spec: _MetricSpec, aggregation: str | None) -> None:
    m = p.metric
    if m == "errors":
        if aggregation not in ("rate", "count"):
            p.fail(f"errors needs rate or count (e.g. \"rate < 1%\"), got {aggregation or 'no aggregation'}")
    elif aggregation in ("rate", "count"):
        p.fail(f"{aggregation} is only for errors (expected p(N), avg, mean, med, min or max)"
               if spec.distribution else f"{aggregation} is only for errors; {m} is a single figure: "
               f"write no aggregation (e.g. \"> 1500\")")
    elif spec.distribution and aggregation is None:
        p.fail(f"{m} is a distribution: start with an aggregation (p(N), avg, mean, med, min or max), "
               f"e.g. \"p(99) < 800\"")
    elif not spec.distribution and aggregation is not None:
        p.fail(f"{m} is a single figure: write no aggregation (e.g. \"> 1500\"), got {aggregation}")


def _normalize(p: _Parser, metric: str, dim: str, number: Decimal, unit: str | None) -> Decimal:
    if unit is None:
        return number
    allowed = _UNITS[dim]
    if unit in allowed:
        return number * allowed[unit]
    expected = f"expected {_or_list(list(allowed))}" if allowed else f"{metric} takes a bare number"
    if unit not in _ALL_UNITS:
        p.fail(f"unknown unit {unit!r} ({expected})")
    hint = "; for a relative margin write baseline * 1.05" if unit == "%" and "baseline" in p.text else ""
    p.fail(f"unit {unit!r} does not fit {metric} ({expected}){hint}")


def _unknown_metric(metric: str) -> str:
    known = metrics()
    close = difflib.get_close_matches(metric, known, n=1)
    hint = f"; did you mean {close[0]}?" if close else f" (known: {', '.join(known)})"
    return f"unknown metric {metric!r}{hint}"


def parse_all(mapping: Mapping[str, Sequence[Any]]) -> list[Threshold]:
    """Parse a profile's `thresholds:` mapping, in order. An item is a string, or the mapping form
    as a run folder's profile keeps it ({"threshold": TEXT, "abort_on_fail": …})."""
    out: list[Threshold] = []
    for metric, texts in mapping.items():
        if metric not in _specs():
            first = texts[0] if isinstance(texts, (list, tuple)) and texts else ""
            raise ThresholdError(f'threshold {metric} "{one_line(str(first))}": {_unknown_metric(metric)}')
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise ThresholdError(f"thresholds {metric}: expected a list of strings like "
                                 f"[\"p(99) < 800ms\"], got {type(texts).__name__}")
        for item in texts:
            text = item.get("threshold") if isinstance(item, Mapping) else item
            if not isinstance(text, str):
                raise ThresholdError(f'threshold {metric} "{text}": expected a string like "p(99) < 800ms", '
                                     f"got {type(text).__name__}")
            out.append(parse(metric, text))
    return out


class LevelFigures(Protocol):
    """What a threshold reads from a level summary (`loadgate.analysis.summary.LevelSummary`)."""

    @property
    def requests(self) -> int: ...

    @property
    def failed(self) -> int: ...

    @property
    def metrics(self) -> dict[str, dict[str, Any]]: ...


def measure(t: Threshold, summary: LevelFigures) -> tuple[float | None, str | None]:
    """The figure `t` reads from one level summary, or (None, why it is n/a)."""
    spec = _specs()[t.metric]
    if spec.distribution:
        stats = summary.metrics.get(t.metric)
        same = figures.figure(t.metric.removesuffix(figures.ADJUSTED)).same_as
        if stats is None and same:  # a figure of a reasoning phase, in a level without one
            stats = summary.metrics.get(same)
        if stats is None:
            return None, f"n/a: {t.metric} is not in this summary"
        v = stats.get(t.stat_key or "")
        return (None, "n/a: no samples") if v is None else (float(v), None)
    if t.metric == "errors":
        requests, failed = summary.requests, summary.failed
        if not requests or failed is None:
            return None, "n/a: no requests"
        return (float(failed) if t.aggregation == "count" else failed / requests), None
    v = figures.read_path(summary, spec.path)
    if v is None and t.metric == "acceptance_length":
        v = figures.read_path(summary, ("acceptance", "counters", "acceptance_length"))
    if v is None:
        why = {"goodput": "no goodput (the profile sets no slo)", "token_goodput": "no goodput (the profile sets no slo)",
               "acceptance_length": "no acceptance length (no speculative decoding statistics)"}
        return None, "n/a: " + why.get(t.metric, "no samples")
    return float(v), None


def _limit(t: Threshold, baseline_summary: LevelFigures | None) -> tuple[float | None, str | None]:
    if not t.baseline:
        return t.value, None
    if baseline_summary is None:
        return None, "no baseline in this run"
    base, why = measure(t, baseline_summary)
    if base is None:
        return None, f"baseline {why}"
    k = t.baseline_operand
    if t.baseline_op is None or k is None:
        return base, None
    return {"*": base * k, "+": base + k, "-": base - k}[t.baseline_op], None


def evaluate(t: Threshold, summary: LevelFigures, baseline_summary: LevelFigures | None = None) -> Outcome:
    """Check `t` against one level summary (and the baseline's, when `t` uses `baseline`)."""
    measured, why = measure(t, summary)
    limit, limit_why = _limit(t, baseline_summary)
    if why is not None or limit_why is not None:
        return Outcome(t, measured, limit, False, why or limit_why)
    assert measured is not None and limit is not None
    if math.isnan(measured) or math.isnan(limit):
        return Outcome(t, measured, limit, False, "n/a: not a number")
    passed = _COMPARATORS[t.comparator](measured, limit)
    reason = None
    if not passed and math.isinf(measured):
        reason = "infinite: failed requests count as +inf" if measured > 0 else "infinite"
    return Outcome(t, measured, limit, passed, reason)


def evaluate_all(ts: Sequence[Threshold], summary: LevelFigures,
                 baseline_summary: LevelFigures | None = None) -> list[Outcome]:
    return [evaluate(t, summary, baseline_summary) for t in ts]


def to_json(outcome: Outcome) -> dict[str, Any]:
    """One outcome for a summary file (+inf stays a float: `jsonutil.dump_json` writes "inf")."""
    t = outcome.threshold
    return {"metric": t.metric, "threshold": t.text, "aggregation": t.aggregation, "comparator": t.comparator,
            "baseline": t.baseline, "unit": DISPLAY_UNIT[t.dimension] or None,
            "measured": outcome.measured, "limit": outcome.limit, "passed": outcome.passed,
            "reason": outcome.reason}


@dataclass(frozen=True)
class LevelJudgement:
    """The profile's thresholds judged on one load level."""

    level: str
    where: str  # "this run", "level 4", "this run, on the median candidate run …"
    outcomes: list[Outcome]


def judge(thresholds: Mapping[str, Sequence[str]], cand: Mapping[str, LevelFigures],
          base: Mapping[str, LevelFigures] | None = None) -> list[LevelJudgement]:
    """Every threshold on every level of `cand` (per-level summaries); `base` is the A/B baseline's
    median run per level (its presence says the candidate is a median run too)."""
    if not thresholds:
        return []
    ts = parse_all({k: list(v) for k, v in thresholds.items()})
    out = []
    for lv, summary in cand.items():
        where = f"level {lv}" if len(cand) > 1 else "this run"
        if base is not None:
            where += ", on the median candidate run" + (" against the median baseline run" if any(
                t.value is None for t in ts) else "")
        out.append(LevelJudgement(lv, where, evaluate_all(ts, summary, None if base is None else base.get(lv))))
    return out


def judged_json(judged: Sequence[LevelJudgement]) -> list[dict[str, Any]]:
    return [{"level": j.level, **to_json(o)} for j in judged for o in j.outcomes]
