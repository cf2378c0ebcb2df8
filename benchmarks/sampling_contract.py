"""Size and power of the distribution-preserving contract, on the simulator's real sampling rules.

Each run draws, at the reference corpus's first two short completion prompts, `n` baseline
samples (speculation off: the first two tokens sampled from the target p at temperature 0.8)
and `n` candidate samples (the first token from p, as prefill gives it; the second from a verify
step: a draft x ~ q, q the sharpened p, judged by the simulator's rule through the very function
its engine uses, `loadgate.sim.speculative.verify_position`), each run with its own seeds, and
applies the contract's test (`loadgate.exactness.sampling`: pooled chi-square per prefix, Holm
across prefixes). The draws are made in-process so that 100 runs take minutes, not hours; the
HTTP path is the same functions behind the simulator's routes (tests/e2e/test_sampling.py), and one
whole `loadgate check` at the chosen sample size is timed at the end.

  rejection  the standard rule: the candidate samples exactly p; the test should pass (each run
             draws its own baseline, so the pass rate estimates 1 - the false-alarm rate, at most
             alpha; a third measurement keeps one baseline for every run, as a stored baseline file
             is reused, where failures of one baseline's checks are not independent)
  argmax     the wrong rule at a share w of draft positions, w set so that the larger of the two
             prefixes' true total-variation distances (joint over the first two tokens, computed
             exactly from the model) is 0.05; the test should fail

The stated power (`--power`): for each sample size, the wrong rule is run in 50 seeded checks at a
given true TV, drawn vectorised from its exact distribution (`sample`), and the share is bisected
until it is caught in 80 % of them; that TV is printed beside the detectable TVs the checks state
(medians over the runs there: for a shift toward the likeliest tokens, and for a difference of
any shape) and their ratios to it.

    python benchmarks/sampling_contract.py [--runs 100] [--alpha 0.01] [--tv 0.05]
    python benchmarks/sampling_contract.py --power [--sizes 4000,16000,32000] [--runs 50]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgate.cli import main as cli  # noqa: E402
from loadgate.config.simconfig import SimConfig  # noqa: E402
from loadgate.exactness.corpus import default_corpus_path, load_corpus  # noqa: E402
from loadgate.exactness.sampling import detectable_tv, distribution_result, pair_label, prefix_test  # noqa: E402

LABELS: dict[tuple[int, int], str] = {}
from loadgate.sim.model import WINDOW, SimModel, roll_hash  # noqa: E402
from loadgate.sim.speculative import argmax_rule_tv, draft_probs, draw, verify_position  # noqa: E402

T = 0.8
SHARPNESS = SimConfig().speculative.draft_sharpness


class Prefix:
    """One prompt's first-token distribution and, per first token, the second token's p and q."""

    def __init__(self, model: SimModel, ids: list[int]) -> None:
        self.model, self.ids = model, ids
        self.h0 = model.context_hash(ids)
        self.ranked0, self.p0 = model.probs(self.h0, T)
        self.next: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def after(self, t0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if t0 not in self.next:
            leaving = self.ids[-WINDOW] if len(self.ids) >= WINDOW else self.model.pad
            ranked, p = self.model.probs(roll_hash(self.h0, leaving, t0), T)
            self.next[t0] = (ranked, p, draft_probs(p, SHARPNESS))
        return self.next[t0]

    def true_tv(self, share: float) -> float:
        """TV distance, joint over (t0, t1), of the argmax rule at `share` from p: sum over t0 of
        p(t0) * share * q[a](1 - p[a]) at the context after t0 (tail below 1e-6 left out)."""
        total = 0.0
        for idx in np.flatnonzero(self.p0 > 1e-6):
            _, p, q = self.after(int(self.ranked0[idx]))
            total += float(self.p0[idx]) * argmax_rule_tv(p, q, share)
        return total

    def sample(self, rng: np.random.Generator, n: int, rule: str | None, share: float) -> list[str]:
        """`n` labels: baseline (rule None: both tokens from p) or candidate (the second token
        from a verify step under `rule`)."""
        out = []
        u = rng.random((n, 5))
        for k in range(n):
            t0 = int(self.ranked0[draw(self.p0, u[k, 0])])
            ranked, p, q = self.after(t0)
            if rule is None:
                idx = draw(p, u[k, 1])
            else:
                idx, _ = verify_position(p, q, rule, u[k, 1], u[k, 2], u[k, 3], share, u[k, 4])
            out.append(pair_label([t0, int(ranked[idx])]))
        return out


def one_run(prefixes: list[Prefix], seed: int, n: int, rule: str, share: float, alpha: float,
            base: list[list[str]] | None = None) -> bool:
    """Whether the contract passes for one seeded run (`base`: one baseline's samples, kept across
    runs as a stored baseline file is; else each run draws its own)."""
    rng = np.random.default_rng([seed, 0x5A3])
    level = alpha / len(prefixes)
    tests = [prefix_test(str(i), base[i] if base else pre.sample(rng, n, None, 1.0), pre.sample(rng, n, rule, share),
                         level, 1.0) for i, pre in enumerate(prefixes)]
    return bool(distribution_result(tests, alpha)["passed"])


def sample(pre: Prefix, rng: np.random.Generator, n: int, share: float | None, labels: dict) -> list[str]:
    """`n` labels of the first two tokens, drawn vectorised from the exact distributions: baseline
    (`share` None: both from p) or the argmax rule at `share` of draft positions, whose second token
    is distributed as p + share q[a] (e_a - p) (`loadgate.sim.speculative.verify_position`, which
    `benchmarks/sampling_contract.py` draws one by one: too slow for 32,000 samples x 50 runs x
    each bisection step here)."""
    cdf0 = np.cumsum(pre.p0)
    first = np.minimum(np.searchsorted(cdf0, rng.random(n) * cdf0[-1], side="right"), len(cdf0) - 1)
    out: list[str] = []
    for idx in np.unique(first):
        k = int((first == idx).sum())
        t0 = int(pre.ranked0[idx])
        ranked, p, q = pre.after(t0)
        probs = p
        if share is not None:
            a = int(np.argmax(p))
            probs = p * (1 - share * q[a])
            probs[a] += share * q[a]
        cdf = np.cumsum(probs)
        second = np.minimum(np.searchsorted(cdf, rng.random(k) * cdf[-1], side="right"), len(cdf) - 1)
        for j in second:
            key = (t0, int(ranked[j]))
            if key not in labels:
                labels[key] = pair_label(list(key))
            out.append(labels[key])
    return out


def checks(prefixes: list[Prefix], n: int, share: float, alpha: float, runs: int) -> tuple[float, float, float]:
    """(share of the runs that caught the wrong rule, median detectable TV they stated for a shift
    toward the likeliest tokens, and for a difference of any shape)."""
    caught, shift, any_shape = 0, [], []
    level = alpha / len(prefixes)
    for s in range(runs):
        rng = np.random.default_rng([20_000 + s, 0x5A3])
        tests = [prefix_test(str(i), sample(pre, rng, n, None, LABELS), sample(pre, rng, n, share, LABELS), level, 1.0)
                 for i, pre in enumerate(prefixes)]
        res = distribution_result(tests, alpha)
        caught += not res["passed"]
        shift.append(res["detectable_shift_tv"])
        any_shape.append(res["detectable_tv"])
    return caught / runs, float(np.median(shift)), float(np.median(any_shape))


def power(sizes: list[int], runs: int, alpha: float, steps: int) -> int:
    """`--power`: the stated detectable TV against the TV at which the wrong rule is caught in 80 %
    of `runs` seeded checks, bisected on the share (the same seeds at every step, so the detection
    rate moves with the share alone), per sample size."""
    model = SimModel(SimConfig())
    cases = [c for c in load_corpus(default_corpus_path()).cases if c.kind == "completion" and "long" not in c.tags][:2]
    prefixes = [Prefix(model, model.tokenizer.encode(c.prompt or "")) for c in cases]
    full = max(pre.true_tv(1.0) for pre in prefixes)
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{runs} seeded checks per step, alpha {alpha}; the wrong rule at every draft position: TV {full:.3f}")
    worst = 0.0
    for n in sizes:
        t0 = time.perf_counter()
        lo, hi = 0.002, min(0.5, full)  # TV: caught in under / over 80 % of the runs
        for _ in range(steps):
            mid = float(np.sqrt(lo * hi))
            rate, _, _ = checks(prefixes, n, mid / full, alpha, runs)
            lo, hi = (mid, hi) if rate < 0.8 else (lo, mid)
        found = float(np.sqrt(lo * hi))
        rate, shift, any_shape = checks(prefixes, n, found / full, alpha, runs)
        worst = max(worst, abs(shift / found - 1))
        print(f"  n = {n:6d} per side per prefix: caught in 80 % at TV {found:.4f} (rate there {rate:.0%}); "
              f"stated: shift toward the likeliest tokens {shift:.4f} ({shift / found:.2f} x), any shape "
              f"{any_shape:.4f} ({any_shape / found:.2f} x) ({time.perf_counter() - t0:.0f} s)")
    print(f"largest deviation of the stated shift figure from the TV caught in 80 %: {worst:.0%}")
    return 0


def whole_check_seconds(n: int, share: float) -> float:
    """Wall time of one `loadgate check` with this sample size on the embedded simulator (the
    baseline's samples drawn first, by the sim-reference capture)."""
    with tempfile.TemporaryDirectory() as tmp:
        doc = {"name": "bench", "target": {"endpoint": "embedded", "sim": {
            "decode_step_us": 100, "decode_us_per_seq": 5, "prefill_us_per_token": 0.2,
            "speculative": {"method": "draft_model", "k": 4, "sampling_rule": "argmax", "wrong_rule_rate": share}}},
            "workload": {"requests": 4, "input_len": {"dist": "fixed", "value": 8},
                         "output_len": {"dist": "fixed", "value": 4}},
            "load": {"concurrency": 1},
            "exactness": {"baseline": "sim-reference", "scenarios": {"solo": True},
                          "sampling": {"seeded_replay": False, "distribution_preserving": True, "samples": n,
                                       "prefixes": 2, "concurrency": 16}},
            "output": {"dir": f"{tmp}/out"}}
        p = Path(tmp) / "p.yaml"
        p.write_text(yaml.safe_dump(doc))
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            cli(["check", str(p)])
        return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--tv", type=float, default=0.05, help="true TV distance of the wrong rule (larger prefix)")
    ap.add_argument("--sizes", default="500,1000,2000,4000", help="samples per side per prefix to try")
    ap.add_argument("--power", action="store_true", help="the stated detectable TV against the TV caught in 80 %% "
                    "of --runs checks, per size in --sizes (default there 4000,16000,32000 and 50 runs)")
    ap.add_argument("--steps", type=int, default=7, help="--power: bisection steps per size")
    args = ap.parse_args()
    if args.power:
        sizes = "4000,16000,32000" if args.sizes == ap.get_default("sizes") else args.sizes
        runs = 50 if args.runs == ap.get_default("runs") else args.runs
        return power([int(x) for x in sizes.split(",")], runs, args.alpha, args.steps)
    model = SimModel(SimConfig())
    cases = [c for c in load_corpus(default_corpus_path()).cases if c.kind == "completion" and "long" not in c.tags][:2]
    prefixes = [Prefix(model, model.tokenizer.encode(c.prompt or "")) for c in cases]
    full = [pre.true_tv(1.0) for pre in prefixes]
    share = args.tv / max(full)
    tvs = [pre.true_tv(share) for pre in prefixes]
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"prefixes: {', '.join(c.id for c in cases)}; temperature {T}, draft q ~ p**{SHARPNESS}")
    print(f"argmax rule at every draft position: true TV {', '.join(f'{v:.3f}' for v in full)}; "
          f"at share w = {share:.3f}: TV {', '.join(f'{v:.3f}' for v in tvs)}")
    chosen = None
    for n in (int(x) for x in args.sizes.split(",")):
        t0 = time.perf_counter()
        fails = sum(not one_run(prefixes, 10_000 + s, n, "argmax", share, args.alpha) for s in range(20))
        print(f"  pilot n = {n}: the wrong rule failed {fails} of 20 ({time.perf_counter() - t0:.1f} s); "
              f"bound: detects TV >= {detectable_tv(n, n, 10, args.alpha / 2):.3f} at df 10")
        if fails == 20:
            chosen = n
            break
    if chosen is None:
        print("no tried size detected the wrong rule in 20 of 20 pilot runs")
        return 1
    results = {}
    for rule in ("rejection", "argmax"):
        t0 = time.perf_counter()
        passed = sum(one_run(prefixes, s, chosen, rule, share, args.alpha) for s in range(args.runs))
        results[rule] = (passed, time.perf_counter() - t0)
    fixed_rng = np.random.default_rng([999, 0x5A3])
    fixed = [pre.sample(fixed_rng, chosen, None, 1.0) for pre in prefixes]
    t0 = time.perf_counter()
    results["fixed"] = (sum(one_run(prefixes, 50_000 + s, chosen, "rejection", share, args.alpha, fixed)
                            for s in range(args.runs)), time.perf_counter() - t0)
    print(f"\n{args.runs} seeded runs each, {chosen} samples per side per prefix "
          f"({4 * chosen} requests a check: 2 prefixes x 2 sides), alpha {args.alpha}:")
    print(f"  correct rule (rejection): passed {results['rejection'][0]} of {args.runs} "
          f"({results['rejection'][1]:.1f} s)")
    print(f"  wrong rule (argmax, TV {max(tvs):.3f}): failed {args.runs - results['argmax'][0]} of {args.runs} "
          f"({results['argmax'][1]:.1f} s)")
    print(f"  correct rule against one stored baseline (as a baseline file is reused): passed "
          f"{results['fixed'][0]} of {args.runs} ({results['fixed'][1]:.1f} s)")
    secs = whole_check_seconds(chosen, share)
    print(f"one whole `loadgate check` at this size through HTTP (embedded simulator, baseline samples "
          f"included): {secs:.1f} s")
    ok = results["rejection"][0] >= 0.95 * args.runs and args.runs - results["argmax"][0] >= 0.95 * args.runs
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
