"""Datasets: the prompts users serve, from the files they have (`workload.dataset`; docs/workloads.md).

Formats (`format: auto` picks one by the name), what a row holds, and how it is read:
- sharegpt: one JSON array of objects with `conversations`: [{from, value}, ...]. The first
  human/user turn is the prompt, the next gpt/assistant turn its reply; system turns before the
  prompt are kept (the prompt is then chat messages). Read whole (one JSON array: orjson parses the
  file several times faster than a streaming parser would, at ~2-3 × the file's size in memory).
- jsonl: one object per line: `messages` (OpenAI chat; a trailing assistant message is the reply),
  `conversations` (ShareGPT turns), or `prompt` (else `text`, `instruction`) with an optional
  `completion` (else `response`, `output`). Lines are indexed by byte offset and read again when drawn.
- parquet: read in record batches of the mapped columns only (pyarrow), never whole.
- arrow: a folder as Hugging Face `datasets.save_to_disk` writes it (`state.json` naming its
  `data-*.arrow` files, each an Arrow IPC stream), or one such `.arrow` file; memory-mapped.
- trace: JSONL of lengths and ids, replayed by `loadgate.load.plan` (what `workload.trace` reads);
  mooncake: JSONL of Mooncake's timed lines (`loadgate.load.workload.trace`).
`fields` maps a row's own names; `category` (a string) groups the request in the figures.

Every row is checked in a first streaming pass before anything is sent: a row that is not an
object, or has none of the prompt fields, is one line naming the file, the row (1-based; a JSONL
file's line) and the fields present. Then rows are drawn (`order: shuffle`: a permutation by the
profile's seed, each row at most once until they run out, then again in that order; `file`: in file
order) and made into requests by `prepare`, which counts them with the tokenizer source:
- a completions API receives the token ids of the row's text (of a chat row: its rendered chat
  template), so the planned prompt length is exact and the server does no re-tokenizing that could
  part from the count; a chat API receives the messages (a prompt row: one user message), planned at
  the template's count;
- `lengths: dataset` keeps the prompt as written, and the reply's token count is the output length
  (rows without a reply: `workload.output_len`); `lengths: profile` cuts each prompt to a length
  drawn from `workload.input_len`, or extends it by repeating its own tokens, and draws the output
  length from `workload.output_len`;
- with `tokenizer: none` nothing is counted: prompts go as text or messages, output lengths come
  from `workload.output_len`, and filters and shaping are refused when the profile is read.
Length filters (`min/max_input_len`, `min/max_output_len`) skip rows; a dataset that filters to
nothing is an error. The prepared requests (`Prepared`) are small and picklable: load workers get
them instead of reading the file again.

Written here: the readers are thin layers over orjson and pyarrow; what no library does is the
mapping of the several row layouts to one request, and the counting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from loadgate.config.profile import Dataset, DatasetFields, Profile
from loadgate.engine.adapters.base import template_kwargs, with_template_kwargs
from loadgate.errors import UsageError

if TYPE_CHECKING:
    import numpy as np

PROMPT_NAMES = ("prompt", "text", "instruction")
COMPLETION_NAMES = ("completion", "response", "output")
TRACE_KEYS = ("input_len", "prompt_ids", "output_len", "max_tokens")
MOONCAKE_KEYS = ("input_length", "output_length", "hash_ids")
_HUMAN, _BOT = ("human", "user"), ("gpt", "assistant", "chatgpt", "bard", "bing", "model")
MAX_CATEGORIES = 64  # figures by category: each one's percentiles, and an A/B test of each
_BATCH = 128  # rows per pyarrow record batch (fewer: less memory held between batches, 1024 held ~35 MiB more)


@dataclass(frozen=True, slots=True)
class Row:
    """One dataset row, as a request needs it: exactly one of `prompt` / `messages`."""

    prompt: str | None
    messages: tuple[dict[str, Any], ...] | None
    completion: str | None
    category: str | None


def _missing_pyarrow(path: Path) -> UsageError:
    return UsageError(f"{path}: reading parquet and Arrow files needs pyarrow, the extra 'datasets': "
                      "pip install 'loadgate[datasets]'")


def detect_format(ds: Dataset, path: Path) -> str:
    """The dataset's format: as given, else by its name (and, for JSONL, its first line)."""
    if ds.format != "auto":
        return ds.format
    if path.is_dir():
        if (path / "state.json").is_file() or any(path.glob("data-*.arrow")):
            return "arrow"
        raise UsageError(f"{path}: a folder without state.json or data-*.arrow files (an Arrow dataset as "
                         "datasets.save_to_disk writes it)")
    suffix = path.suffix.lower()
    if suffix == ".json":
        return "sharegpt"
    if suffix == ".parquet":
        return "parquet"
    if suffix == ".arrow":
        return "arrow"
    if suffix in (".jsonl", ".ndjson"):
        try:
            with open(path, "rb") as f:
                line = next((x for x in f if x.strip()), b"")
        except OSError as e:
            raise UsageError(f"{path}: cannot read: {e.strerror}") from None
        try:
            first = orjson.loads(line) if line else None
        except orjson.JSONDecodeError:
            return "jsonl"  # its reader names the line
        # one rule: a line that states its lengths (or ids) is a trace's; Mooncake's names are its own
        if isinstance(first, dict) and any(k in first for k in MOONCAKE_KEYS):
            return "mooncake"
        trace = isinstance(first, dict) and any(k in first for k in TRACE_KEYS)
        return "trace" if trace else "jsonl"
    raise UsageError(f"{path}: cannot tell the dataset's format from its name: set workload.dataset.format "
                     "(sharegpt, jsonl, parquet, arrow or trace)")


# --- rows as the formats hold them -----------------------------------------------------------------


class _Source(Protocol):
    path: Path
    unit: str  # "row" or "line"

    def __len__(self) -> int: ...

    def scan(self, wanted: set[int] | None = None) -> Iterator[tuple[int, Any]]:
        """(row index, the row as read) of every row, or only of those `wanted`, in file order."""
        ...

    def number(self, k: int) -> int:
        """Row `k`'s number in the messages (1-based; a JSONL file's line)."""
        ...


class _JsonArray:
    unit = "row"

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            data = orjson.loads(path.read_bytes())
        except OSError as e:
            raise UsageError(f"{path}: cannot read: {e.strerror}") from None
        except orjson.JSONDecodeError as e:
            raise UsageError(f"{path}: not JSON ({e}); a ShareGPT file is one JSON array of objects") from None
        if not isinstance(data, list):
            raise UsageError(f"{path}: expected a JSON array of objects (ShareGPT), got {type(data).__name__}")
        self.rows = data

    def __len__(self) -> int:
        return len(self.rows)

    def scan(self, wanted: set[int] | None = None) -> Iterator[tuple[int, Any]]:
        ks = range(len(self.rows)) if wanted is None else sorted(wanted)
        for k in ks:
            yield k, self.rows[k]

    def number(self, k: int) -> int:
        return k + 1


class JsonLines:
    """A JSONL file's non-empty lines, indexed by byte offset (8 bytes each), read again when asked
    for (datasets here, traces in `loadgate.load.plan`)."""

    unit = "line"

    def __init__(self, path: Path) -> None:
        import numpy as np

        self.path = path
        offsets, lines = [], []
        try:
            with open(path, "rb") as f:
                pos = 0
                for lineno, line in enumerate(f, 1):
                    if line.strip():
                        offsets.append(pos)
                        lines.append(lineno)
                    pos += len(line)
        except OSError as e:
            raise UsageError(f"{path}: cannot read: {e.strerror}") from None
        self.offsets, self.lines = np.asarray(offsets, dtype=np.int64), np.asarray(lines, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.offsets)

    def _parse(self, k: int, line: bytes) -> Any:
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            raise UsageError(f"{self.path}: line {self.number(k)}: not a JSON object") from None

    def raw(self, wanted: set[int] | None = None) -> Iterator[tuple[int, bytes]]:
        """(index, bytes) of every non-empty line, or of those `wanted`, in file order."""
        try:
            with open(self.path, "rb") as f:
                if wanted is None:
                    k = 0
                    for line in f:
                        if line.strip():
                            yield k, line
                            k += 1
                    return
                for k in sorted(wanted):
                    f.seek(int(self.offsets[k]))
                    yield k, f.readline()
        except OSError as e:
            raise UsageError(f"{self.path}: cannot read: {e.strerror}") from None

    def scan(self, wanted: set[int] | None = None) -> Iterator[tuple[int, Any]]:
        for k, line in self.raw(wanted):
            yield k, self._parse(k, line)

    def number(self, k: int) -> int:
        return int(self.lines[k])


class _Columns:
    """Parquet or Arrow: record batches of the columns a row needs (see `columns_for`)."""

    unit = "row"

    def __init__(self, path: Path, fmt: str, fields: DatasetFields) -> None:
        try:
            import pyarrow as pa
        except ImportError:
            raise _missing_pyarrow(path) from None
        self.path, self.fmt, self.pa = path, fmt, pa
        if fmt == "parquet":
            import pyarrow.parquet as pq

            try:
                # read a page at a time: pre-buffering (the default) keeps the column chunks it
                # read in memory, about the file's size over a whole pass
                self.pq = pq.ParquetFile(str(path), pre_buffer=False, buffer_size=1 << 20)
            except (OSError, pa.ArrowException) as e:
                raise UsageError(f"{path}: not a parquet file: {e}") from None
            names = list(self.pq.schema_arrow.names)
            self.n = self.pq.metadata.num_rows
        else:
            self.files = self._arrow_files(path)
            names, self.n = [], 0
            for f in self.files:
                schema, batches = self._open(f)
                if names and list(schema.names) != names:
                    raise UsageError(f"{f}: its columns ({', '.join(schema.names)}) are not those of "
                                     f"{self.files[0].name} ({', '.join(names)})")
                names = list(schema.names)
                self.n += sum(b.num_rows for b in self._guarded(f, batches))
        self.columns = columns_for(fields, names, path)

    @staticmethod
    def _arrow_files(path: Path) -> list[Path]:
        if path.is_file():
            return [path]
        state = path / "state.json"
        if state.is_file():
            try:
                files = [path / str(d["filename"]) for d in orjson.loads(state.read_bytes())["_data_files"]]
            except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as e:
                raise UsageError(f"{state}: expected datasets' state.json with _data_files ({e})") from None
        else:
            files = sorted(path.glob("data-*.arrow"))
        missing = [f for f in files if not f.is_file()]
        if missing or not files:
            raise UsageError(f"{path}: Arrow data file not found: {missing[0] if missing else 'data-*.arrow'}")
        return files

    def _open(self, f: Path) -> tuple[Any, Iterator[Any]]:
        """(schema, record batches) of one memory-mapped Arrow IPC file."""
        pa = self.pa
        try:
            try:
                stream = pa.ipc.open_stream(pa.memory_map(str(f)))
                return stream.schema, iter(stream)
            except pa.ArrowInvalid:  # the random-access file format
                reader = pa.ipc.open_file(pa.memory_map(str(f)))
                return reader.schema, (reader.get_batch(i) for i in range(reader.num_record_batches))
        except (OSError, pa.ArrowException) as e:
            raise UsageError(f"{f}: not an Arrow IPC file: {e}") from None

    def __len__(self) -> int:
        return int(self.n)

    def _guarded(self, f: Path, batches: Iterator[Any]) -> Iterator[Any]:
        """`batches`, a damaged file's read error as one line naming it."""
        try:
            yield from batches
        except (OSError, self.pa.ArrowException) as e:
            raise UsageError(f"{f}: cannot read: {e}") from None

    def _batches(self, wanted: set[int] | None) -> Iterator[tuple[int, Any]]:
        """(index of its first row, batch) of every batch (parquet: of the row groups holding a
        `wanted` row only)."""
        start = 0
        if self.fmt == "parquet":
            meta = self.pq.metadata
            bounds = [0]
            for g in range(meta.num_row_groups):
                bounds.append(bounds[-1] + meta.row_group(g).num_rows)
            import bisect

            groups = (list(range(meta.num_row_groups)) if wanted is None else
                      sorted({bisect.bisect_right(bounds, k) - 1 for k in wanted}))
            for g in groups:
                start = bounds[g]
                for b in self._guarded(self.path, self.pq.iter_batches(batch_size=_BATCH, row_groups=[g],
                                                                       columns=self.columns)):
                    yield start, b
                    start += b.num_rows
            return
        for f in self.files:
            for b in self._guarded(f, self._open(f)[1]):
                yield start, b.select(self.columns)
                start += b.num_rows

    def scan(self, wanted: set[int] | None = None) -> Iterator[tuple[int, Any]]:
        for start, batch in self._batches(wanted):
            stop = start + batch.num_rows
            if wanted is None:
                for j, row in enumerate(batch.to_pylist()):
                    yield start + j, row
            else:
                ks = sorted(k for k in wanted if start <= k < stop)
                if ks:
                    for k, row in zip(ks, batch.take([k - start for k in ks]).to_pylist(), strict=True):
                        yield k, row
        self.pa.default_memory_pool().release_unused()  # what the pass freed goes back at its end

    def number(self, k: int) -> int:
        return k + 1


def _candidates(fields: DatasetFields) -> dict[str, tuple[str, ...]]:
    """The names each role is looked for under: the mapped one alone, else the usual ones (when
    any of the prompt roles is mapped, only the mapped prompt roles are looked for)."""
    mapped = fields.conversations or fields.messages or fields.prompt
    return {
        "conversations": (fields.conversations,) if fields.conversations else (() if mapped else ("conversations",)),
        "messages": (fields.messages,) if fields.messages else (() if mapped else ("messages",)),
        "prompt": (fields.prompt,) if fields.prompt else (() if mapped else PROMPT_NAMES),
        "completion": (fields.completion,) if fields.completion else COMPLETION_NAMES,
        "category": (fields.category or "category",),
    }


def columns_for(fields: DatasetFields, names: Sequence[str], path: Path) -> list[str]:
    """The columns to read of a table with these `names`; a mapped name it lacks is an error."""
    for role in ("prompt", "messages", "conversations", "completion", "category"):
        mapped = getattr(fields, role)
        if mapped and mapped not in names:
            raise UsageError(f"{path}: workload.dataset.fields.{role}: no column {mapped!r} "
                             f"(columns: {', '.join(names)})")
    cand = _candidates(fields)
    cols = [n for role in ("conversations", "messages", "prompt", "completion", "category")
            for n in cand[role] if n in names]
    if not any(n in names for role in ("conversations", "messages", "prompt") for n in cand[role]):
        wanted = [n for role in ("conversations", "messages", "prompt") for n in cand[role]]
        raise UsageError(f"{path}: needs a column of one of {', '.join(wanted)} "
                         f"(columns: {', '.join(names)}); map yours with workload.dataset.fields")
    return list(dict.fromkeys(cols))


# --- one row -> Row ---------------------------------------------------------------------------------


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _message(m: Any) -> dict[str, Any] | None:
    if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
        return None
    return {"role": m["role"], "content": m["content"]}


def to_row(obj: Any, fields: DatasetFields, where: str) -> Row:
    """The request parts of one row (UsageError naming `where` and the fields present)."""
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: expected an object (a JSON object, a table row), got {type(obj).__name__}")
    cand = _candidates(fields)
    cat = next((obj[k] for k in cand["category"] if obj.get(k) is not None), None)
    if cat is not None and (isinstance(cat, bool) or not isinstance(cat, str | int)):
        raise UsageError(f"{where}: {cand['category'][0]}: a category is a name (text), got {type(cat).__name__}")
    category = None if cat is None or cat == "" else str(cat)
    completion = next((t for k in cand["completion"] if (t := _text(obj.get(k))) is not None), None)
    for k in cand["conversations"]:
        turns = obj.get(k)
        if turns is None:
            continue
        if not isinstance(turns, list):
            raise UsageError(f"{where}: {k}: expected a list of {{from, value}} turns")
        system, prompt, reply = [], None, None
        for t in turns:
            if not isinstance(t, dict) or not isinstance(t.get("value"), str):
                raise UsageError(f"{where}: {k}: expected a list of {{from, value}} turns, got {str(t)[:80]!r}")
            who = str(t.get("from", "")).lower()
            if prompt is None and who == "system":
                system.append({"role": "system", "content": t["value"]})
            elif prompt is None and who in _HUMAN:
                prompt = t["value"]
            elif prompt is not None and who in _BOT:
                reply = t["value"]
                break
        if not prompt:
            raise UsageError(f"{where}: {k}: no human turn with text (the prompt)")
        if system:
            return Row(None, (*system, {"role": "user", "content": prompt}), reply or completion, category)
        return Row(prompt, None, reply or completion, category)
    for k in cand["messages"]:
        msgs = obj.get(k)
        if msgs is None:
            continue
        ms = [_message(m) for m in msgs] if isinstance(msgs, list) else [None]
        if not ms or any(m is None for m in ms):
            raise UsageError(f"{where}: {k}: expected a list of {{role, content}} messages with text content")
        clean = [m for m in ms if m is not None]
        if clean[-1]["role"] == "assistant":
            completion = clean.pop()["content"] or completion
        if not clean:
            raise UsageError(f"{where}: {k}: no message before the assistant's reply")
        return Row(None, tuple(clean), completion, category)
    for k in cand["prompt"]:
        if (t := _text(obj.get(k))) is not None:
            return Row(t, None, completion, category)
        if obj.get(k) is not None and not isinstance(obj[k], str):
            raise UsageError(f"{where}: {k}: expected the prompt's text, got {type(obj[k]).__name__}")
    wanted = [n for role in ("conversations", "messages", "prompt") for n in cand[role]]
    raise UsageError(f"{where}: needs one of {', '.join(wanted)} (fields present: "
                     f"{', '.join(map(str, obj)) or 'none'}); map yours with workload.dataset.fields")


# --- the dataset -------------------------------------------------------------------------------------


class Rows:
    """A dataset's rows, every one checked (see the module docstring)."""

    def __init__(self, ds: Dataset, path: Path, chat_api: bool, counts: bool) -> None:
        self.ds, self.path = ds, path
        fmt = detect_format(ds, path)
        if fmt == "trace":
            raise ValueError("a trace is read by loadgate.load.plan")
        self.format = fmt
        src: _Source
        if fmt == "sharegpt":
            src = _JsonArray(path)
        elif fmt == "jsonl":
            src = JsonLines(path)
        else:
            src = _Columns(path, fmt, ds.fields)
        self.src = src
        if not len(src):
            raise UsageError(f"{path}: the dataset has no rows")
        for k, obj in src.scan():
            row = self.row(k, obj)
            if row.messages is not None and not chat_api and not counts:
                raise UsageError(f"{self.where(k)}: chat messages go to a completions API as their chat "
                                 "template's tokens: needs workload.tokenizer server or a local tokenizer (not "
                                 "none), or a chat target.api")

    def __len__(self) -> int:
        return len(self.src)

    def where(self, k: int) -> str:
        return f"{self.path}: {self.src.unit} {self.src.number(k)}"

    def row(self, k: int, obj: Any) -> Row:
        return to_row(obj, self.ds.fields, self.where(k))

    def order(self, seed: int) -> np.ndarray:
        """The order rows are drawn in (see the module docstring)."""
        import numpy as np

        if self.ds.order == "file":
            return np.arange(len(self), dtype=np.int64)
        return np.random.default_rng([seed, 0xDA7A5E7]).permutation(len(self))

    def fetch(self, ks: Sequence[int]) -> dict[int, Row]:
        """The rows of these indices (one pass over the file)."""
        return {k: self.row(k, obj) for k, obj in self.src.scan(set(ks))}


def open_rows(profile: Profile) -> Rows | None:
    """The profile's dataset, every row checked (None: no dataset, a trace, which the plan reads, or
    conversations, which `loadgate.load.workload.sessions` reads)."""
    from loadgate.engine.adapters import is_chat

    ds = profile.workload.source
    if ds is None or profile.workload.sessions is not None or has_trace(profile):
        return None
    return Rows(ds, profile.resolve(ds.path), is_chat(profile.target.api), profile.workload.tokenizer != "none")


def has_trace(profile: Profile) -> bool:
    """The requests come from a trace (`workload.trace`, or a dataset of format trace or mooncake)."""
    ds = profile.workload.source
    return ds is not None and detect_format(ds, profile.resolve(ds.path)) in ("trace", "mooncake")


# --- counting and preparing ------------------------------------------------------------------------


class Counter(Protocol):
    """Token ids from the tokenizer source (`server` or a local tokenizer)."""

    async def text_ids(self, text: str, special: bool) -> list[int]:
        """Ids of `text`; `special`: with what the engine adds to a prompt (its BOS), as it would."""
        ...

    async def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Ids of the messages' rendered chat template (with the generation prompt)."""
        ...

    async def text(self, ids: list[int]) -> str:
        ...


class LocalCounter:
    def __init__(self, tok: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        self.tok, self.template_kwargs = tok, template_kwargs or {}

    async def text_ids(self, text: str, special: bool) -> list[int]:
        ids = list(self.tok.encode(text))
        if not ids and special:  # a prompt (a reply of no tokens takes workload.output_len)
            raise UsageError(f"{self.tok.path}: a dataset prompt has no tokens: {text[:60]!r}")
        return ids

    async def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        from loadgate.load.workload.hf import TemplateError

        try:
            return list(self.tok.chat_ids(messages, template_kwargs=self.template_kwargs))
        except TemplateError as e:
            raise UsageError(f"{e}: chat rows need the chat template") from None

    async def text(self, ids: list[int]) -> str:
        return str(self.tok.decode(ids))


class ServerCounter:
    """The engine's /tokenize and /detokenize (16 at a time)."""

    def __init__(self, session: Any, base: str, model: str, api: str,
                 template_kwargs: dict[str, Any] | None = None) -> None:
        from loadgate.engine.adapters import adapter_for

        self.session, self.base, self.model = session, base, model
        self.template_kwargs = template_kwargs or {}
        self.adapter = adapter_for(api)
        self.sem = asyncio.Semaphore(16)

    async def _post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        from loadgate.load.workload.pool import _post

        async with self.sem:
            return await _post(self.session, f"{self.base}/{route}", body)

    @staticmethod
    def _ids(answer: dict[str, Any], what: str) -> list[int]:
        ids = answer.get("tokens")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
            from loadgate.errors import EngineError

            hint = ("; this server's /tokenize does not render chat messages: give workload.tokenizer a local "
                    "tokenizer with the model's chat template" if what == "chat messages" else "")
            raise EngineError(f"/tokenize of {what} answered no token ids{hint}")
        return ids

    async def text_ids(self, text: str, special: bool) -> list[int]:
        # special: what the engine adds to a text prompt (its BOS), asked for explicitly (llama-server's
        # /tokenize leaves it out unless asked, its completion route adds it)
        body = self.adapter.tokenize_body(self.model, text, special)
        return self._ids(await self._post("tokenize", body), "a dataset prompt")

    async def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        from loadgate.errors import EngineError

        try:
            answer = await self._post("tokenize", with_template_kwargs(
                {"model": self.model, "messages": messages, "add_generation_prompt": True}, self.template_kwargs))
        except EngineError as e:
            raise EngineError(f"{e.message.rstrip('.')}; chat rows are counted by the server's /tokenize with "
                              "messages: give workload.tokenizer a local tokenizer with a chat template") from None
        return self._ids(answer, "chat messages")

    async def text(self, ids: list[int]) -> str:
        piece = self.adapter.detokenized(await self._post("detokenize", {"model": self.model, "tokens": ids}))
        return piece if isinstance(piece, str) else ""


def counter_for(profile: Profile, session: Any, base: str, model: str) -> Counter | None:
    """The counter of `workload.tokenizer` (None: `none`, nothing is counted)."""
    t = profile.workload.tokenizer
    if t == "none":
        return None
    kwargs = template_kwargs(profile.target.extra_body)
    if t == "server":
        return ServerCounter(session, base, model, profile.target.api, kwargs)
    from loadgate.load.workload.hf import HFTokenizer

    return LocalCounter(HFTokenizer.load(profile.resolve(t)), kwargs)



@dataclass(frozen=True, slots=True)
class DatasetRequest:
    """One measured request made from a row: exactly one of ids / text / messages."""

    row: int  # the row's index in the dataset
    prompt_ids: tuple[int, ...] | None
    prompt_text: str | None
    messages: tuple[dict[str, Any], ...] | None
    counted_len: int | None  # the prompt's whole count (None: not counted, tokenizer none)
    output_len: int
    category: str | None


@dataclass(frozen=True)
class Prepared:
    """A dataset's requests for one run (what meta.json says of them in `meta`); under `load.schedule:
    trace`, in time order with their offsets from the window's start (`offsets_ns`) and the replay's
    facts (`trace`, as `TraceRequests.info` gives them)."""

    requests: tuple[DatasetRequest, ...]
    meta: dict[str, Any]
    offsets_ns: tuple[int, ...] | None = None
    trace: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.requests)


def _fit(ids: list[int], n: int) -> list[int]:
    """`ids` cut to `n`, or repeated until they are `n` long (`ids` not empty)."""
    assert ids, "a prompt of no tokens cannot be shaped"
    if len(ids) >= n:
        return ids[:n]
    return (ids * (n // len(ids) + 1))[:n]


async def _make(row: Row, k: int, counter: Counter | None, chat_api: bool, want_in: int | None,
                profile_out: int) -> DatasetRequest:
    """One request of `row` (see the module docstring); `want_in`: the shaped prompt length."""
    if counter is None:  # tokenizer none: as written, nothing counted
        msgs = row.messages if chat_api else None
        if chat_api and msgs is None:
            msgs = ({"role": "user", "content": row.prompt or ""},)
        return DatasetRequest(k, None, None if chat_api else row.prompt, msgs, None, profile_out, row.category)
    out = profile_out
    if row.completion is not None and want_in is None:  # lengths: dataset
        out = len(await counter.text_ids(row.completion, False)) or profile_out
    if not chat_api:
        if row.messages is not None:
            ids = await counter.chat_ids(list(row.messages))
        else:
            ids = await counter.text_ids(row.prompt or "", True)
        if want_in is not None:
            ids = _fit(ids, want_in)
        return DatasetRequest(k, tuple(ids), None, None, len(ids), out, row.category)
    chat: list[dict[str, Any]] = (list(row.messages) if row.messages is not None else
                                  [{"role": "user", "content": row.prompt or ""}])
    n = len(await counter.chat_ids(chat))
    if want_in is not None and n != want_in:  # shape the last message's own tokens
        while True:
            own = await counter.text_ids(str(chat[-1]["content"]), False)
            template = n - len(own)  # the template and the earlier messages
            if template < want_in or len(chat) == 1:
                break
            # the conversation before the last message alone is too long: its oldest exchange goes
            # (a user turn and the assistant's answer to it, so the turns still alternate)
            drop = next((j for j, m in enumerate(chat[:-1]) if m["role"] != "system"), 0)
            del chat[drop]
            if drop < len(chat) - 1 and chat[drop]["role"] == "assistant":
                del chat[drop]
            n = len(await counter.chat_ids(chat))
        chat[-1] = {**chat[-1], "content": await counter.text(_fit(own or [0], max(1, want_in - template)))}
        n = len(await counter.chat_ids(chat))
    return DatasetRequest(k, None, None, tuple(chat), n, out, row.category)


def _passes(r: DatasetRequest, ds: Dataset, has_reply: bool) -> bool:
    n_in = r.counted_len or 0
    f = ds.filters
    if n_in < f.get("min_input_len", 0) or n_in > f.get("max_input_len", n_in):
        return False
    if ("min_output_len" in f or "max_output_len" in f) and not has_reply:
        return False  # a reply's length cannot be judged without one
    return f.get("min_output_len", 0) <= r.output_len <= f.get("max_output_len", r.output_len)


async def prepare(profile: Profile, rows: Rows, counter: Counter | None) -> Prepared:
    """The run's measured requests from `rows` (see the module docstring)."""
    import numpy as np

    from loadgate.engine.adapters import is_chat
    from loadgate.load.workload.lengths import draw_lengths

    w, ds = profile.workload, rows.ds
    timed = profile.load.schedule == "trace"
    n = len(rows) if timed else w.request_count  # timed: every row, then the window's
    chat_api = is_chat(profile.target.api)
    rng = np.random.default_rng([profile.seed, 0xDA7A0])
    isl = draw_lengths(w.input_len, n, rng, profile.resolve("."))
    osl = draw_lengths(w.output_len, n, rng, profile.resolve("."))
    shaped = ds.lengths == "profile"
    order = np.arange(len(rows), dtype=np.int64) if timed else rows.order(profile.seed)
    taken: list[DatasetRequest] = []
    pos = skipped = 0
    grow = 1
    while len(taken) < n and pos < len(order):
        # without filters every drawn row is taken: count only those; with them, twice what is
        # missing and more each pass (each pass reads the file again)
        size = (n - len(taken)) if not ds.filters else max(2 * (n - len(taken)), 64) * grow
        grow *= 4
        chunk = [int(k) for k in order[pos:pos + size]]
        pos += len(chunk)
        got = rows.fetch(chunk)
        base = len(taken)
        made = await asyncio.gather(*(
            _make(got[k], k, counter, chat_api, int(isl[(base + j) % n]) if shaped else None,
                  int(osl[(base + j) % n])) for j, k in enumerate(chunk)))
        for r, k in zip(made, chunk, strict=True):
            if len(taken) == n:
                break
            if _passes(r, ds, got[k].completion is not None):
                taken.append(r)
            else:
                skipped += 1
    if not taken:
        raise UsageError(f"{rows.path}: no row of {len(rows)} passes the length filters "
                         f"({', '.join(f'{k} {v}' for k, v in ds.filters.items())})")
    cats = {r.category for r in taken if r.category is not None}
    if len(cats) > MAX_CATEGORIES:
        raise UsageError(f"{rows.path}: {len(cats)} categories among the drawn rows (at most {MAX_CATEGORIES}): a "
                         "category groups requests in the figures; map workload.dataset.fields.category to a field "
                         "with few values")
    distinct = len(taken)
    reqs = [taken[j % distinct] for j in range(n)]  # rows run out: again in the same order
    counted = counter is not None
    meta = {"path": str(rows.path), "format": rows.format, "rows": len(rows), "distinct_rows": distinct,
            "order": ds.order, "lengths": ds.lengths,
            "output_lengths": ("workload.output_len" if shaped or not counted else
                               "each row's reply (rows without one: workload.output_len)"),
            "prompt_counts": "the tokenizer source" if counted else "none (the server's usage)",
            "filters": ds.filters, "skipped_by_filters": skipped,
            "categories": sorted({r.category for r in reqs if r.category is not None})}
    if timed:
        return _timed(profile, rows, taken, meta)
    return Prepared(tuple(reqs), meta)


def row_stamps(rows: Rows) -> np.ndarray:
    """Every row's `timestamp` (ms; NaN where it has none or not a number >= 0), for `load.schedule:
    trace`: a one-line error naming the first row without one."""
    import numpy as np

    from loadgate.load.workload.timing import stamp_of

    stamps = np.full(len(rows), np.nan)
    for k, obj in rows.src.scan():
        ts = stamp_of(obj)
        if ts is None:
            got = obj.get("timestamp") if isinstance(obj, dict) else None
            raise UsageError(f"{rows.where(k)}: " + ("no timestamp" if got is None else
                             f"timestamp: expected a number of milliseconds >= 0, got {got!r}")
                             + ": load.schedule trace sends each request at its timestamp (ms), which every row needs")
        stamps[k] = ts
    return stamps


def _timed(profile: Profile, rows: Rows, taken: list[DatasetRequest], meta: dict[str, Any]) -> Prepared:
    """The rows taken, in the order of their timestamps, cut to the profile's window (see
    `loadgate.load.workload.trace`)."""
    from loadgate.load.workload.timing import Window, replay_info, timed_order

    load = profile.load
    stamps = row_stamps(rows)[[r.row for r in taken]]
    window = Window(load.trace_start_s, load.trace_length_s, load.trace_speed, profile.workload.requests)
    order, offsets, late = timed_order(stamps, window, rows.path)
    reqs = tuple(taken[int(j)] for j in order)
    trace = replay_info(offsets, late, len(rows), window)
    return Prepared(reqs, {**meta, "distinct_rows": len(reqs)}, tuple(offsets), trace)
