"""The simulator's tokenizer and chat template as a Hugging Face folder (`loadgate sim --write-tokenizer`).

The simulator splits text greedily into the longest vocabulary token (`loadgate.sim.tokenizer`).
A `tokenizers` WordPiece model with no continuing-subword prefix does the same greedy longest
match, but within one pre-tokenized piece, and its cost grows with the square of a piece's length.
So the text is first split where no merged token can reach across: between two characters that
never stand side by side inside a multi-byte token (a letter then a space, for instance). Greedy
matching cannot cross such a place, so splitting there changes nothing, and the pieces stay short.
Bytes are mapped to characters as GPT-2's byte-level scheme does, so non-ASCII text becomes the
same single-byte tokens as in the simulator; the special tokens are added tokens.

The chat template renders what `loadgate.sim.chat.render_chat` renders for messages without
tools (the simulator's tool header is a sha256 a template cannot compute: with tools it raises).
"""

from __future__ import annotations

import json
from pathlib import Path

from loadgate.sim.vocab import SPECIAL_TOKENS, build_vocab

CHAT_TEMPLATE = (
    "{% if tools %}{{ raise_exception('the simulator renders tools as a sha256 header, "
    "which this template cannot compute') }}{% endif %}"
    "{% for message in messages %}"
    "{% set c = message['content'] %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if c is string %}{{ c }}"
    "{% elif c is iterable %}{% for part in c %}"
    "{% if part['type'] == 'text' and part['text'] is string %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _byte_chars() -> dict[int, str]:
    """GPT-2's reversible map from byte values to printable characters (what ByteLevel uses)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def _split_pattern(merged: list[bytes]) -> str:
    """A regex matching one ASCII character after which no merged token continues (followed by a
    character it is never followed by inside a token, or by a non-ASCII one), or one non-ASCII
    character: the pre-tokenizer ends a piece after each match."""
    pairs = {(a, b) for t in merged for a, b in zip(t, t[1:], strict=False)}
    alts = []
    for a in range(128):
        never = [b for b in range(128) if (a, b) not in pairs]
        cls = "".join(f"\\x{b:02x}" for b in never)
        alts.append(f"\\x{a:02x}(?=[{cls}]|[^\\x00-\\x7f])" if cls else f"\\x{a:02x}(?=[^\\x00-\\x7f])")
    alts.append("[^\\x00-\\x7f]")
    return "|".join(alts)


def hf_tokenizer_json(vocab_size: int) -> str:
    """tokenizer.json text for the simulator's vocabulary of `vocab_size` entries."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    table = build_vocab(vocab_size)
    n_plain = vocab_size - len(SPECIAL_TOKENS)
    chars = _byte_chars()
    vocab = {"".join(chars[b] for b in tok): i for i, tok in enumerate(table[:n_plain])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token=chars[0], continuing_subword_prefix="",
                                     max_input_chars_per_word=1 << 30))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_split_pattern(table[256:n_plain])), behavior="merged_with_previous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL_TOKENS])
    for k, s in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(s) != n_plain + k:  # pragma: no cover - the layout of build_vocab
            raise AssertionError(f"special token {s} did not get id {n_plain + k}")
    return str(tok.to_str())


def write_hf_tokenizer(vocab_size: int, folder: Path) -> Path:
    """Write tokenizer.json and tokenizer_config.json (chat template, special tokens) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(hf_tokenizer_json(vocab_size), encoding="utf-8")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
              "eos_token": "<|endoftext|>", "bos_token": None, "pad_token": "<|endoftext|>",
              "model_max_length": 1 << 30, "clean_up_tokenization_spaces": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return folder

