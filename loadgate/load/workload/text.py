"""Deterministic filler text, tokenized by the target to get a pool of real token ids.

Prompts are built from token ids drawn from this pool so their length is exact (ids are sent
as-is where the API allows). The text is generated from a fixed word list and a fixed seed, so
the pool is the same on every machine and Python version.
"""

from __future__ import annotations

_WORDS = (
    "the of and to in is that for it as with was on be by at this from or have an are which not "
    "but all were when we there can more if one has so what their out would about up them some "
    "time could into other than then now only its two over also after first new because way "
    "these may where most through system model token server request batch cache latency value "
    "queue memory engine kernel stream decode prefill draft verify accept length window sample "
    "return def class import self none true false data list dict string number result error "
    "print count index table field node graph tree edge path file line word text page chapter "
    "river mountain city garden winter summer morning evening window letter market"
).split()


def filler_text(n_words: int = 6000, seed: int = 20261129) -> str:
    """About `n_words` words of pseudo-prose with punctuation and newlines."""
    import numpy as np

    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(_WORDS), size=n_words)
    out: list[str] = []
    for k, w in enumerate(picks):
        word = _WORDS[int(w)]
        out.append(word.capitalize() if k == 0 or out[-1].endswith((".", "\n")) else word)
        r = rng.random()
        if r < 0.06:
            out[-1] += "."
        elif r < 0.09:
            out[-1] += ","
        if r < 0.01:
            out[-1] += "\n"
    return " ".join(out)


def filler_words() -> tuple[str, ...]:
    """The distinct words of the filler text, in a fixed order (prompts of `tokenizer: none`)."""
    return tuple(dict.fromkeys(_WORDS))
