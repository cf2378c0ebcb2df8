"""The reference corpus: the cases the exactness check replays at temperature 0.

A corpus is a JSONL file, one case (a JSON object) per line; blank lines are skipped. Keys:
  id          unique non-empty string
  kind        "completion" or "chat"
  max_tokens  integer >= 1
  stop        optional list of non-empty strings
  tags        optional list of non-empty strings (`long` marks cases used only by the `long` scenario)
and the prompt, from exactly one source:
  prompt                               literal text (completion)
  prompt_words + prompt_seed [+ prompt]  `filler_text(prompt_words, prompt_seed)` followed by the
                                       optional literal `prompt` suffix, appended as is (completion)
  prefix_words + prefix_seed + prompt  `filler_text(prefix_words, prefix_seed)` followed by the
                                       literal `prompt`, appended as is (completion)
  messages [+ tools]                   list of {role, content} messages and optional OpenAI tool
                                       schemas (chat only; chat cases take no other source)
`filler_text` is `loadgate.load.workload.text.filler_text`, deterministic on every machine.

`load_corpus(path)` resolves every prompt to its text and returns a `Corpus` whose `sha256` is the
sha256 of `orjson.dumps([case.to_json() for case in cases], option=OPT_SORT_KEYS)`: it covers the
text actually sent, not the compact form in the file. Any malformed line raises `CorpusError`
(a `UsageError`, exit code 2) with one line `FILE:LINE: KEY: REASON`.

`build_reference_cases()` generates the shipped `workloads/reference.jsonl`;
`python scripts/write_corpus.py [PATH]` rewrites it (or writes PATH).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import orjson

from loadgate.errors import UsageError
from loadgate.load.workload.text import filler_text

KINDS = ("completion", "chat")
CASE_KEYS = ("id", "kind", "max_tokens", "stop", "tags", "prompt", "prompt_words", "prompt_seed",
             "prefix_words", "prefix_seed", "messages", "tools")
MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
TOKENS_PER_WORD = 1.3
"""Rough BPE tokens per filler word, used to size the threshold and long cases. The real count
depends on the engine's tokenizer (the simulator's byte-level tokenizer gives about 1.44)."""
_Fail = Callable[[str, str], NoReturn]


class CorpusError(UsageError):
    """A corpus that does not validate: `FILE:LINE: KEY: REASON` (LINE and KEY when known)."""

    def __init__(self, file: str, line: int | None, key: str, reason: str) -> None:
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {key}: {reason}" if key else f"{where}: {reason}")
        self.file, self.line, self.key, self.reason = file, line, key, reason


@dataclass(frozen=True)
class Case:
    """One resolved case. `prompt` is the full text for completion cases (None for chat);
    `messages`/`tools` are set for chat cases only. Treat the dicts inside as read-only."""

    id: str
    kind: str
    max_tokens: int
    stop: tuple[str, ...]
    tags: tuple[str, ...]
    prompt: str | None
    messages: tuple[dict[str, Any], ...] | None
    tools: tuple[dict[str, Any], ...] | None

    def to_json(self) -> dict[str, Any]:
        """Every field, tuples as lists, absent values as None (the form the corpus hash covers)."""
        return {"id": self.id, "kind": self.kind, "max_tokens": self.max_tokens, "stop": list(self.stop),
                "tags": list(self.tags), "prompt": self.prompt,
                "messages": None if self.messages is None else list(self.messages),
                "tools": None if self.tools is None else list(self.tools)}

    def __hash__(self) -> int:
        return hash(orjson.dumps(self.to_json(), option=orjson.OPT_SORT_KEYS))


@dataclass(frozen=True)
class Corpus:
    """The cases of one file, in file order, and the sha256 of their resolved canonical JSON."""

    path: Path
    cases: tuple[Case, ...]
    sha256: str

    def select(self, long: bool) -> tuple[Case, ...]:
        """Cases tagged `long` when `long` is True, every other case when False (file order)."""
        return tuple(c for c in self.cases if ("long" in c.tags) == long)


def default_corpus_path() -> Path:
    """`workloads/reference.jsonl` at the repository root (beside the `loadgate` package)."""
    return Path(__file__).resolve().parents[2] / "workloads" / "reference.jsonl"


def corpus_sha256(cases: tuple[Case, ...] | list[Case]) -> str:
    """sha256 hex of the sorted-key orjson of `[c.to_json() for c in cases]`."""
    return hashlib.sha256(orjson.dumps([c.to_json() for c in cases], option=orjson.OPT_SORT_KEYS)).hexdigest()


def load_corpus(path: str | Path) -> Corpus:
    """Read, validate and resolve a corpus file (see the module docstring for the format).

    Raises `UsageError` when the file cannot be read and `CorpusError` naming the file, line,
    key and reason for the first bad line, a duplicate id, or a file with no cases."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UsageError(f"{p}: cannot read the corpus file ({e.strerror or e})") from None
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise CorpusError(str(p), n, "", f"not valid JSON ({str(e).splitlines()[0]})") from None
        case = parse_case(obj, str(p), n)
        if case.id in seen:
            raise CorpusError(str(p), n, "id", f"duplicate id {case.id!r} (first used on line {seen[case.id]})")
        seen[case.id] = n
        cases.append(case)
    if not cases:
        raise CorpusError(str(p), None, "", "no cases: the file is empty (one JSON object per line expected)")
    return Corpus(path=p, cases=tuple(cases), sha256=corpus_sha256(cases))


def parse_case(obj: Any, file: str = "<corpus>", line: int | None = None) -> Case:
    """Validate one decoded line and resolve its prompt; raises `CorpusError` on the first problem."""
    def fail(key: str, reason: str) -> NoReturn:
        raise CorpusError(file, line, key, reason)

    if not isinstance(obj, dict):
        fail("", f"a case must be a JSON object, got {_type(obj)}")
    for k in (k for k in obj if k not in CASE_KEYS):
        fail(k, f"unknown key (known keys: {', '.join(CASE_KEYS)})")
    for k, what in (("id", "a unique non-empty string"), ("kind", "'completion' or 'chat'"),
                    ("max_tokens", "an integer >= 1")):
        if k not in obj:
            fail(k, f"missing: every case needs {k} ({what})")
    if not isinstance(obj["id"], str) or not obj["id"]:
        fail("id", f"must be a non-empty string, got {obj['id']!r}")
    kind = obj["kind"]
    if kind not in KINDS:
        fail("kind", f"must be 'completion' or 'chat', got {kind!r}")
    if not _is_int(obj["max_tokens"]) or obj["max_tokens"] < 1:
        fail("max_tokens", f"must be an integer >= 1, got {obj['max_tokens']!r}")
    stop = _strings(obj.get("stop", []), "stop", fail)
    tags = _strings(obj.get("tags", []), "tags", fail)
    prompt: str | None = None
    messages: tuple[dict[str, Any], ...] | None = None
    tools: tuple[dict[str, Any], ...] | None = None
    if kind == "chat":
        for k in ("prompt", "prompt_words", "prompt_seed", "prefix_words", "prefix_seed"):
            if k in obj:
                fail(k, "two prompt sources: a chat case takes its prompt from messages only")
        if "messages" not in obj:
            fail("messages", "missing: a chat case needs messages (a list of {role, content})")
        messages = _messages(obj["messages"], fail)
        if "tools" in obj:
            tools = _tools(obj["tools"], fail)
    else:
        for k in ("messages", "tools"):
            if k in obj:
                fail(k, "only chat cases take messages and tools (this case has kind 'completion')")
        prompt = _completion_prompt(obj, fail)
    return Case(id=obj["id"], kind=kind, max_tokens=obj["max_tokens"], stop=stop, tags=tags,
                prompt=prompt, messages=messages, tools=tools)


def _completion_prompt(obj: dict[str, Any], fail: _Fail) -> str:
    words = "prompt_words" in obj or "prompt_seed" in obj
    prefix = "prefix_words" in obj or "prefix_seed" in obj
    if words and prefix:
        fail("prefix_words", "two prompt sources: use prompt_words + prompt_seed or prefix_words + "
                             "prefix_seed + prompt, not both")
    literal: str | None = obj.get("prompt")
    if "prompt" in obj and not isinstance(literal, str):
        fail("prompt", f"must be a string, got {_type(literal)}")
    if words or prefix:
        n_key, s_key = ("prompt_words", "prompt_seed") if words else ("prefix_words", "prefix_seed")
        for k in (n_key, s_key):
            if k not in obj:
                fail(k, f"missing: {n_key} and {s_key} go together")
        for k, low in ((n_key, 1), (s_key, 0)):
            if not _is_int(obj[k]) or obj[k] < low:
                fail(k, f"must be an integer >= {low}, got {obj[k]!r}")
        if prefix and literal is None:
            fail("prompt", "missing: prefix_words + prefix_seed must be followed by a literal prompt")
        return filler_text(obj[n_key], obj[s_key]) + (literal or "")
    if literal is None:
        fail("prompt", "missing: a completion case needs prompt, prompt_words + prompt_seed, or "
                       "prefix_words + prefix_seed + prompt")
    if not literal:
        fail("prompt", "must not be empty")
    return literal


def _messages(value: Any, fail: _Fail) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list) or not value:
        fail("messages", f"must be a non-empty list of {{role, content}} objects, got {value!r:.60}")
    for i, m in enumerate(value):
        key = f"messages[{i}]"
        if not isinstance(m, dict):
            fail(key, f"must be an object, got {_type(m)}")
        for k in (k for k in m if k not in MESSAGE_KEYS):
            fail(f"{key}.{k}", f"unknown message key (known: {', '.join(sorted(MESSAGE_KEYS))})")
        if not isinstance(m.get("role"), str) or m["role"] not in ROLES:
            fail(f"{key}.role", f"must be one of {', '.join(sorted(ROLES))}, got {m.get('role')!r}")
        content = m.get("content")
        if "tool_calls" in m and (not isinstance(m["tool_calls"], list)
                                  or not all(isinstance(t, dict) for t in m["tool_calls"])):
            fail(f"{key}.tool_calls", "must be a list of objects")
        if content is None and "tool_calls" not in m:
            fail(f"{key}.content", "missing: a message needs content (null only beside tool_calls)")
        if content is not None and not isinstance(content, (str, list)):
            fail(f"{key}.content", f"must be a string or a list of parts, got {_type(content)}")
        if isinstance(content, list) and not all(isinstance(p, dict) and isinstance(p.get("type"), str)
                                                 for p in content):
            fail(f"{key}.content", "every content part must be an object with a string type")
        for k in ("name", "tool_call_id"):
            if k in m and not isinstance(m[k], str):
                fail(f"{key}.{k}", f"must be a string, got {_type(m[k])}")
    return tuple(value)


def _tools(value: Any, fail: _Fail) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list):
        fail("tools", f"must be a list of OpenAI tool schemas, got {_type(value)}")
    for i, t in enumerate(value):
        if not isinstance(t, dict):
            fail(f"tools[{i}]", f"must be an object, got {_type(t)}")
        if t.get("type") != "function":
            fail(f"tools[{i}].type", f"must be 'function', got {t.get('type')!r}")
        fn = t.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            fail(f"tools[{i}].function.name", "missing: every tool needs function.name (a string)")
    return tuple(value)


def _strings(value: Any, key: str, fail: _Fail) -> tuple[str, ...]:
    if not isinstance(value, list):
        fail(key, f"must be a list of strings, got {_type(value)}")
    for i, s in enumerate(value):
        if not isinstance(s, str) or not s:
            fail(f"{key}[{i}]", f"must be a non-empty string, got {s!r}")
    return tuple(value)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _type(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(v), type(v).__name__)


# ---- the shipped reference corpus ------------------------------------------------------------

_SHORT = (  # (id, extra tags, max_tokens, prompt)
    ("short-capital", ("prose",), 32, "The capital of France is"),
    ("short-poem", ("prose",), 64, "Write a short poem about a river in winter.\n\n"),
    ("short-cache", ("prose",), 64, "Explain in two sentences why a cache makes repeated work faster."),
    ("short-story", ("prose",), 96, "Once upon a time, in a small village by the sea, there lived"),
    ("short-arithmetic", ("prose",), 32, "Q: What is 17 multiplied by 23?\nA:"),
    ("short-list", ("prose",), 96, "List three differences between a stack and a queue:\n1."),
    ("short-french", ("prose", "unicode"), 48, "Les élèves ont écrit : « Le matin, la rivière"),
    ("short-cjk-emoji", ("prose", "unicode"), 48, "東京の朝は静かです。🌅 Translate to English:"),
    ("short-python", ("code",), 96,
     'def fibonacci(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n'),
    ("short-python-io", ("code",), 64, "import json\n\n\ndef load_config(path):\n    with open(path) as f:\n"),
    ("short-sql", ("code",), 64,
     "SELECT customer_id, COUNT(*) AS orders\nFROM orders\nWHERE created_at >= '2026-01-01'\n"),
    ("short-c", ("code",), 128,
     "// Binary search over a sorted array of ints.\nint binary_search(const int *a, int n, int key) {\n"),
    ("short-rust", ("code",), 64, "fn main() {\n    let mut v = vec![3, 1, 2];\n    v.sort();\n"),
    ("short-json", ("code",), 48, '{"name": "loadgate", "version": "0.1.0", "dependencies": ['),
    ("short-html", ("code",), 64, "<!DOCTYPE html>\n<html>\n  <head>\n    <title>"),
)
_PREFIX_SUFFIXES = (
    "\n\nQuestion: What is the first word of the passage above?\nAnswer:",
    "\n\nSummarize the passage above in one sentence:",
    "\n\nList three words that appear in the passage above:\n1.",
    "\n\nTranslate the first sentence of the passage above into French:",
    "\n\nThe passage above",
)
_THRESHOLD_TOKENS = (250, 260, 500, 520, 1010, 1040, 2040, 2060, 4080, 4110)
_LONG_TOKENS = (8200, 8600, 9000)
def _summary(tokens: int) -> str:
    """A closing question that differs per case: engines (and the simulator, whose next token
    depends on the last few tokens) must not see every long prompt end the same way."""
    return f"\n\nPassage {tokens} in one sentence: it is about"


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


_WEATHER = _fn("get_weather", "Current weather for a city.", {
    "city": {"type": "string", "description": "City name, e.g. Lisbon"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"])
_SEARCH = _fn("search_docs", "Search the documentation.", {
    "query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 20}}, ["query"])
_TIME = _fn("get_time", "Current local time in an IANA time zone.", {"timezone": {"type": "string"}}, ["timezone"])
_CONVERT = _fn("convert_units", "Convert a quantity between units.", {
    "quantity": {"type": "object", "properties": {"value": {"type": "number"}, "unit": {"type": "string"}},
                 "required": ["value", "unit"]},
    "to": {"type": "string"}}, ["quantity", "to"])


def _chat_cases() -> list[dict[str, Any]]:
    def user(text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def assistant(text: str) -> dict[str, Any]:
        return {"role": "assistant", "content": text}
    system = {"role": "system", "content": "You are a concise assistant. Answer in plain text."}
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": '{"city": "Oslo", "unit": "celsius"}'}}
    return [
        {"id": "chat-hello", "kind": "chat", "tags": ["chat"], "max_tokens": 64,
         "messages": [user("Say hello in three languages.")]},
        {"id": "chat-sky", "kind": "chat", "tags": ["chat"], "max_tokens": 96,
         "messages": [system, user("Why is the sky blue?")]},
        {"id": "chat-tools-weather", "kind": "chat", "tags": ["chat", "tools"], "max_tokens": 64,
         "messages": [user("What is the weather in Lisbon right now, in Celsius?")], "tools": [_WEATHER]},
        {"id": "chat-tools-two", "kind": "chat", "tags": ["chat", "tools"], "max_tokens": 96,
         "messages": [user("Find the page about chunked prefill, then tell me the time in Tokyo.")],
         "tools": [_SEARCH, _TIME]},
        {"id": "chat-tools-nested", "kind": "chat", "tags": ["chat", "tools"], "max_tokens": 64,
         "messages": [system, user("Convert 12 miles to kilometres.")], "tools": [_CONVERT]},
        {"id": "chat-tools-result", "kind": "chat", "tags": ["chat", "tools", "multi-turn"], "max_tokens": 96,
         "messages": [system, user("Is it cold in Oslo?"),
                      {"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": -4, "sky": "snow"}'}],
         "tools": [_WEATHER]},
        {"id": "chat-multi-recipe", "kind": "chat", "tags": ["chat", "multi-turn"], "max_tokens": 128,
         "messages": [system, user("I have rice, eggs and spinach."),
                      assistant("You could make a spinach omelette with rice on the side."),
                      user("How long does that take, step by step?")]},
        {"id": "chat-multi-code", "kind": "chat", "tags": ["chat", "multi-turn"], "max_tokens": 128,
         "messages": [user("Write a Python function that reverses a string."),
                      assistant("def reverse(s: str) -> str:\n    return s[::-1]"),
                      user("Now make it skip spaces."),
                      assistant("def reverse(s: str) -> str:\n    return ''.join(reversed(s.replace(' ', '')))"),
                      user("Add a docstring and a doctest.")]},
        {"id": "chat-stop-planet", "kind": "chat", "tags": ["chat", "stop"], "max_tokens": 64, "stop": ["."],
         "messages": [user("Name one planet of the solar system and describe it.")]},
    ]


def build_reference_cases() -> list[dict[str, Any]]:
    """The shipped corpus as raw JSON objects, in file order (deterministic, no I/O).

    Word counts of generated prompts are `round(tokens / TOKENS_PER_WORD)` for the intended token
    counts in `_THRESHOLD_TOKENS` and `_LONG_TOKENS`; the real counts depend on the tokenizer."""
    cases: list[dict[str, Any]] = [
        {"id": cid, "kind": "completion", "tags": ["short", *extra], "max_tokens": mt, "prompt": text}
        for cid, extra, mt, text in _SHORT]
    for suffix in ("a", "b"):
        cases.append({"id": f"repeat-short-{suffix}", "kind": "completion", "tags": ["repeat"], "max_tokens": 64,
                      "prompt": "Describe the smell of rain on a summer evening."})
    for suffix in ("a", "b"):
        cases.append({"id": f"repeat-medium-{suffix}", "kind": "completion", "tags": ["repeat"],
                      "max_tokens": 64, "prompt_words": 300, "prompt_seed": 777, "prompt": _summary(300)})
    for i, text in enumerate(_PREFIX_SUFFIXES):
        cases.append({"id": f"prefix-{i + 1}", "kind": "completion", "tags": ["shared-prefix"], "max_tokens": 48,
                      "prefix_words": 400, "prefix_seed": 4242, "prompt": text})
    cases += [
        {"id": "stop-newline", "kind": "completion", "tags": ["stop"], "max_tokens": 64, "stop": ["\n"],
         "prompt": "The three primary colours of light are"},
        {"id": "stop-list", "kind": "completion", "tags": ["stop"], "max_tokens": 96, "stop": ["\n4.", "\n\n"],
         "prompt": "Groceries:\n1. Apples\n2. Bread\n3."},
        {"id": "stop-code", "kind": "completion", "tags": ["stop"], "max_tokens": 128, "stop": ["\ndef ", "\nclass "],
         "prompt": "def add(a, b):\n    return a + b\n\n\ndef"},
    ]
    cases += _chat_cases()
    for i, tokens in enumerate(_THRESHOLD_TOKENS):
        cases.append({"id": f"threshold-{tokens:04d}", "kind": "completion", "tags": ["threshold"],
                      "max_tokens": 48, "prompt_words": round(tokens / TOKENS_PER_WORD),
                      "prompt_seed": 5000 + i, "prompt": _summary(tokens)})
    for i, tokens in enumerate(_LONG_TOKENS):
        cases.append({"id": f"long-{tokens:04d}", "kind": "completion", "tags": ["long"], "max_tokens": 64,
                      "prompt_words": round(tokens / TOKENS_PER_WORD), "prompt_seed": 9000 + i,
                      "prompt": _summary(tokens)})
    return cases


def render_jsonl(cases: list[dict[str, Any]]) -> bytes:
    """One compact JSON object per line (keys in the objects' own order), newline-terminated."""
    return b"".join(orjson.dumps(c) + b"\n" for c in cases)
