"""The simulator's fixed vocabulary, written out in code so it never depends on the environment.

Layout for a vocabulary of `size` entries:
  ids 0..255            one token per byte value
  ids 256..size-4       merged multi-byte tokens, in the fixed order produced by `_merged_candidates`
  ids size-3..size-1    the special tokens `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`

The merged tokens are ASCII strings: whitespace runs, code punctuation, a fixed word list in four
forms (`w`, ` w`, `W`, ` W`), digit groups, then letter pairs and triples (with and without a
leading space) and finally space-prefixed four-letter strings, taken in that order until the
vocabulary is full. Duplicates are skipped, so the same `size` always gives the same table.
"""

from __future__ import annotations

import itertools
import string
from collections.abc import Iterator

SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

_WORDS = """
the of and to in is it that for on with as was at by be this are or from an but not have has had
were which one all their there can will would more if no out so up what about when who them some
could into than then its also only other new time two may first any these like use used such way
well just over most after where through because very many should each those while both between
same own under never being here must does did made still back even much before around find right
how get got make many know take see come think look want give day good work year part place
thing world life hand high long little small large great old young last next early late point
number group case fact system program question problem name value data list file line code text
string int float bool none true false return def class self import from print len range open read
write close main test assert error raise try except finally with lambda yield pass break continue
while for else elif global nonlocal async await dict set tuple type object super init call args
kwargs key keys items index count sum max min sort sorted map filter zip enumerate path os sys json
time date user users server client request response status message result results output input
config option options model models token tokens batch step size length width height total mean
rate load test tests run runs start stop end begin function method module package version build
node tree root child parent left right top bottom first last next prev head tail queue stack cache
memory disk network port host address socket stream chunk buffer bytes byte char chars word words
sentence paragraph document page book story history science nature water fire earth light dark
city country state government company market money price business family child children people
person man woman friend house home school student teacher music game team player house room door
window table chair food water tree plant animal dog cat bird fish horse car road street river sea
""".split()

_PUNCT = """
() (): ): ():\n )\n ()\n [] {} [0] [1] [i] == != <= >= -> => += -= *= /= ** // ## #
.. ... ,  ;  :  .  ?  !  '' \"\" \"\"\" ''' \\n %s %d {0} {} () = ( ) [ ] { } : , . ; ' \" _ __
self. self._ ._ .__ __init__ __name__ __main__ 0. 1. 0x ** ?: <| |> </ /> <!-- --> :// www. .com
""".split()


def _whitespace() -> Iterator[str]:
    for k in range(2, 17):
        yield " " * k
    for k in range(2, 5):
        yield "\n" * k
    for k in (2, 4, 6, 8, 12, 16):
        yield "\n" + " " * k
    for k in (3, 7, 11, 15):
        yield " " * k
    for k in range(2, 5):
        yield "\t" * k
        yield "\n" + "\t" * (k - 1)
    yield "\r\n"


def _word_forms() -> Iterator[str]:
    for w in _WORDS:
        cap = w[:1].upper() + w[1:]
        yield w
        yield " " + w
        yield cap
        yield " " + cap
    for p in _PUNCT:
        yield p
        yield " " + p
    for p in ",.:;!?)":
        yield p + " "


def _digits() -> Iterator[str]:
    for a, b in itertools.product(string.digits, repeat=2):
        yield a + b
    for d in string.digits:
        yield " " + d
    for a, b, c in itertools.product(string.digits, repeat=3):
        yield a + b + c


def _letters() -> Iterator[str]:
    lower = string.ascii_lowercase
    for n in (2, 3):
        for combo in itertools.product(lower, repeat=n):
            s = "".join(combo)
            yield s
            yield " " + s
    for combo in itertools.product(lower, repeat=4):
        yield " " + "".join(combo)


def _merged_candidates() -> Iterator[str]:
    yield from _whitespace()
    yield from _word_forms()
    yield from _digits()
    yield from _letters()


_WORD_LIKE_BYTES = b"\n .,:;()[]{}=+-*/#'\""


def word_like(token: bytes) -> bool:
    """Whether a token reads as text: a whitespace run, a listed word or punctuation form, or one
    of a few single characters (newline, space, common punctuation). The simulated model puts
    only these at the top of its distributions, so greedy output looks like words."""
    if len(token) == 1:
        return token in _WORD_LIKE_BYTES
    return token in _WORD_LIKE_SET


def build_vocab(size: int) -> list[bytes]:
    """The token table for a vocabulary of `size` entries (see the module docstring for the layout).

    Returns a list whose index is the token id and whose value is the token's bytes.
    """
    n_special = len(SPECIAL_TOKENS)
    if size < 256 + n_special + 1:
        raise ValueError(f"vocab_size {size} is too small (at least {256 + n_special + 1})")
    table: list[bytes] = [bytes([b]) for b in range(256)]
    seen = set(table)
    want = size - n_special
    for cand in _merged_candidates():
        if len(table) >= want:
            break
        tok = cand.encode("ascii")
        if len(tok) < 2 or tok in seen:
            continue
        seen.add(tok)
        table.append(tok)
    if len(table) < want:  # pragma: no cover - the candidate stream is far longer than 65536
        raise ValueError(f"vocab_size {size} is larger than the fixed candidate list")
    table.extend(s.encode("ascii") for s in SPECIAL_TOKENS)
    return table


_WORD_LIKE_SET = frozenset(c.encode("ascii") for c in itertools.chain(_whitespace(), _word_forms()))
