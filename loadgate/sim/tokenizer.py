"""Byte-level tokenizer over the fixed vocabulary of `loadgate.sim.vocab`.

Encoding: the text's UTF-8 bytes are split greedily, left to right, into the longest vocabulary
token that matches at each position (every single byte is a token, so this always succeeds).
Occurrences of the special-token strings (`<|endoftext|>`, `<|im_start|>`, `<|im_end|>`) become
their special ids when `parse_special` is true (the default, as Hugging Face tokenizers do).
Decoding concatenates the tokens' bytes and decodes them as UTF-8 (invalid sequences become
U+FFFD), so `decode(encode(t)) == t` for every Python string without surrogates.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Sequence

from loadgate.sim.vocab import SPECIAL_TOKENS, build_vocab


class Tokenizer:
    """Fixed byte-level tokenizer; `vocab_size` picks how many merged tokens exist."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self._tokens: list[bytes] = build_vocab(vocab_size)
        self._ids: dict[bytes, int] = {t: i for i, t in enumerate(self._tokens)}
        first_special = vocab_size - len(SPECIAL_TOKENS)
        self.special_ids: frozenset[int] = frozenset(range(first_special, vocab_size))
        self.eos_id = self._ids[b"<|endoftext|>"]
        self.im_start_id = self._ids[b"<|im_start|>"]
        merged = self._tokens[256:first_special]
        self._prefixes: frozenset[bytes] = frozenset(t[:k] for t in merged for k in range(1, len(t) + 1))
        self._special_re = re.compile("(" + "|".join(re.escape(s) for s in SPECIAL_TOKENS) + ")")
        self._strs: list[str] = [self._display(t) for t in self._tokens]
        self.ascii_text: list[str | None] = [t.decode("ascii") if t.isascii() else None for t in self._tokens]
        """Per token id: its text if all its bytes are ASCII (decodes alone, whatever came before)."""

    @staticmethod
    def _display(tok: bytes) -> str:
        try:
            return tok.decode("utf-8")
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{b:02x}" for b in tok)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token."""
        return self._tokens[token_id]

    def token_str(self, token_id: int) -> str:
        """One token as vLLM shows it in logprobs: its UTF-8 text, or `bytes:\\xNN...` if not valid UTF-8."""
        return self._strs[token_id]

    def encode(self, text: str, parse_special: bool = True) -> list[int]:
        """Token ids of `text` (greedy longest match; see the module docstring)."""
        if not parse_special:
            return self._encode_bytes(text.encode("utf-8"))
        out: list[int] = []
        for part in self._special_re.split(text):
            if not part:
                continue
            sid = self._ids.get(part.encode("utf-8")) if part in SPECIAL_TOKENS else None
            if sid is not None:
                out.append(sid)
            else:
                out.extend(self._encode_bytes(part.encode("utf-8")))
        return out

    def _encode_bytes(self, data: bytes) -> list[int]:
        ids = self._ids
        prefixes = self._prefixes
        out: list[int] = []
        i, n = 0, len(data)
        while i < n:
            best_end = i + 1
            j = i + 2
            while j <= n and data[i:j] in prefixes:
                if data[i:j] in ids:
                    best_end = j
                j += 1
            out.append(ids[data[i:best_end]])
            i = best_end
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids` (special tokens included)."""
        toks = self._tokens
        data = b"".join(toks[i] for i in ids)
        return data.decode("utf-8", errors="replace")

    def incremental_decoder(self) -> codecs.IncrementalDecoder:
        """A UTF-8 decoder that holds back incomplete multi-byte characters between calls."""
        return codecs.getincrementaldecoder("utf-8")(errors="replace")

    def check_ids(self, ids: Sequence[int]) -> int | None:
        """The first id outside the vocabulary, or None if all are valid."""
        for i in ids:
            if not (0 <= i < self.vocab_size):
                return i
        return None
