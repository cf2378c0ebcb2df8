"""YAML → frozen dataclasses, with strict validation and a JSON Schema, from the definitions alone.

The dataclass definitions are the whole format: type hints say what each key holds, `dataclasses`
defaults say what may be left out, and field `metadata` adds
`help` (the description), `min` / `max` (inclusive bounds), `exclusive_min`, `one_of` (for a
`str`: a function giving the values allowed, for a list known only when the profile is read, such
as the registered engine APIs) and `internal` (the field cannot be set from YAML). After a dataclass is built its `check()` method, if any, returns
cross-field problems as `(key, reason)` pairs; `key` may be dotted to reach into nested sections.

Every problem raises `ProfileError`, whose message is one line:
`FILE:LINE: key.path: what was expected, got what`. Lines come from `yaml.compose`, which keeps the
start mark of every node; `parse_yaml` returns the data plus a map from key path (`load.rate`,
`load.concurrency[1]`) to the 1-based line where that key or list item is written.

Supported annotations: `bool`, `int`, `float`, `str`, `Literal[...]`, unions (`X | None`,
`int | tuple[int, ...]`), `tuple[T, ...]` (a YAML list), `dict[str, T]` and nested dataclasses,
recursive ones included. Scalars are read as YAML 1.1 (PyYAML) with these adjustments:

* `int` takes YAML integers and integral floats (`2.0`, `1.0e+3`, `1e3`), never `true`/`false`,
  never `2.5`; `float` takes integers and floats but not NaN or infinities; `str` takes only
  strings: `run_id: 2024` is refused with a hint to quote it (no silent conversion).
* A plain scalar in exponent form without a dot (`1e3`, `5E-2`), a string in YAML 1.1, is read as
  a float as YAML 1.2 would. YAML 1.1 octals (`010`) and base-60 numbers (`1:30`) stay strings,
  so they are refused where a number is expected instead of becoming 8 or 90.
* Timestamps stay strings; merge keys (`<<`), custom tags and non-string keys are refused.
* A section left empty (`sim:` with its keys commented out) is null, and refused with a hint.

Keys are checked in file order, so the first problem in the file is the one reported; a key missing
from a mapping is reported at the line of that mapping's key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
import math
import re
import types
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from loadgate.errors import ProfileError

T = TypeVar("T")

_INT_TEXT = re.compile(r"[-+]?(0|[1-9][0-9_]*|0x[0-9a-fA-F][0-9a-fA-F_]*)")
_EXP_FLOAT_TEXT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+")
_MAX_NODES = 100_000
_TAG = "tag:yaml.org,2002:"


# ---------------------------------------------------------------------------------------- reading


def load_dataclass_file(cls: type[T], path: Path) -> T:
    """Read, parse and validate the YAML file at `path` into an instance of `cls`.

    A field `path` marked `internal` on `cls` receives the file path as given (a str), so callers
    can resolve file references relative to it.
    """
    file = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ProfileError(file, None, "", "file not found") from None
    except IsADirectoryError:
        raise ProfileError(file, None, "", "is a directory, expected a YAML file") from None
    except OSError as e:
        raise ProfileError(file, None, "", f"cannot read the file: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ProfileError(file, None, "", f"not UTF-8 text (bad byte at offset {e.start})") from None
    data, lines = parse_yaml(text, file=file)
    obj = load_dataclass(cls, data, file=file, lines=lines)
    source = {f.name: f for f in dataclasses.fields(obj)}.get("path")  # type: ignore[arg-type]
    if source is not None and source.metadata.get("internal"):
        obj = dataclasses.replace(obj, path=file)  # type: ignore[type-var]
    return obj


def parse_yaml(text: str, *, file: str) -> tuple[Any, dict[str, int]]:
    """Parse one YAML document into plain data and a map from key path to 1-based line.

    The root's line is stored under the empty path. Raises ProfileError for syntax errors, an
    empty document, duplicate or non-string keys, merge keys, unknown tags and alias bombs.
    """
    try:
        root = _compose(text)
    except yaml.MarkedYAMLError as e:
        mark, ctx = e.problem_mark or e.context_mark, e.context_mark
        line = mark.line + 1 if mark else None
        where = f"line {line}, column {mark.column + 1}" if mark else ""
        if e.context and ctx and ctx.line + 1 != line:
            where += f"; {e.context} at line {ctx.line + 1}"
        problem = e.problem or e.context or "invalid YAML"
        if "another document" in problem:
            problem, where = "a profile is one YAML document, found a second one ('---')", where[:where.find(";")]
        elif "'\\t'" in problem:
            problem += " (indent with spaces, not tabs)"
        raise ProfileError(file, line, "", _squeeze(f"YAML syntax error: {problem} ({where})")) from None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        char = e.character if isinstance(e.character, str) else chr(e.character)
        raise ProfileError(file, line, "", f"character {char!r} (#x{ord(char):04x}) is not allowed in YAML") from None
    except yaml.YAMLError as e:
        raise ProfileError(file, None, "", _squeeze(f"YAML syntax error: {e}")) from None
    except RecursionError:
        raise ProfileError(file, None, "", "YAML nesting too deep") from None
    if root is None:
        raise ProfileError(file, None, "", "the file is empty, expected a mapping of settings")
    lines = {"": root.start_mark.line + 1}
    reader = _NodeReader(file, lines)
    return reader.build(root, "", 0), lines


def _compose(text: str) -> yaml.Node | None:
    """The document's node tree: libyaml's parser when PyYAML has it (about ten times faster on a
    long profile), PyYAML's own parser when it does not and for every document libyaml refuses, so
    that a syntax error is reported with the same words, line and column either way."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        with contextlib.suppress(yaml.YAMLError):
            return yaml.compose(text, Loader=fast)
    return yaml.compose(text, Loader=yaml.SafeLoader)


class _NodeReader:
    """Turns composed YAML nodes into dicts, lists and scalars while recording line numbers."""

    def __init__(self, file: str, lines: dict[str, int]) -> None:
        self.file, self.lines, self.count = file, lines, 0

    def fail(self, node: yaml.Node, path: str, reason: str) -> ProfileError:
        return ProfileError(self.file, node.start_mark.line + 1, path, reason)

    def build(self, node: yaml.Node, path: str, depth: int) -> Any:
        self.count += 1
        if self.count > _MAX_NODES or depth > 100:
            raise self.fail(node, path, "document too large or too deeply nested (aliases expand)")
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _TAG + "merge":
                    raise self.fail(key_node, path, "merge keys ('<<') are not supported")
                key = self.build(key_node, path, depth + 1)
                key = key.text if isinstance(key, _ExponentFloat) else key
                if not isinstance(key, str):
                    hint = " (put it in quotes)" if not isinstance(key, (dict, list)) else ""
                    raise self.fail(key_node, path, f"keys must be strings, got {show(key)}{hint}")
                sub = _join(path, key)
                if key in out:
                    first = self.lines.get(sub)
                    raise self.fail(key_node, sub, f"duplicate key {key!r} (first given at line {first})")
                self.lines[sub] = key_node.start_mark.line + 1
                out[key] = self.build(value_node, sub, depth + 1)
            return out
        if isinstance(node, yaml.SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                sub = f"{path}[{i}]"
                self.lines[sub] = item.start_mark.line + 1
                items.append(self.build(item, sub, depth + 1))
            return items
        return self.scalar(node, path)

    def scalar(self, node: yaml.Node, path: str) -> Any:
        text, tag, plain = node.value, node.tag, not getattr(node, "style", None)  # None or "" (libyaml)
        if tag == _TAG + "null":
            return None
        if tag == _TAG + "bool":
            return text.lower() in ("yes", "true", "on", "y")
        if tag == _TAG + "int":
            return int(text.replace("_", ""), 0) if _INT_TEXT.fullmatch(text) else text
        if tag == _TAG + "float":
            low = text.lower().replace("_", "")
            if ":" in low:
                return text
            if low.endswith((".inf", ".nan")):
                return float(low.replace(".", ""))
            return float(low)
        if tag == _TAG + "str":
            return _ExponentFloat(text) if plain and _EXP_FLOAT_TEXT.fullmatch(text) else text
        if tag in (_TAG + "timestamp", _TAG + "binary"):
            return text
        raise self.fail(node, path, f"unsupported YAML tag {tag!r}")


class _ExponentFloat(float):
    """A plain `1e3`: a number where one is expected, its text where a string is (as YAML 1.1)."""

    text: str

    def __new__(cls, text: str) -> _ExponentFloat:
        self = super().__new__(cls, text)
        self.text = text
        return self

    def __repr__(self) -> str:
        return self.text


# ------------------------------------------------------------------------------------- validating


def load_dataclass(cls: type[T], data: Any, *, file: str, lines: dict[str, int]) -> T:
    """Validate plain data (as from `parse_yaml`) into an instance of dataclass `cls`.

    `file` and `lines` only serve error messages; pass `lines={}` for data that has no file.
    """
    if not isinstance(data, dict):
        raise ProfileError(file, lines.get(""), "",
                           f"the top level must be a mapping of settings, got {show(data)}")
    return _Converter(file, lines).dataclass(cls, data, "")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # in a setting: NUL, a newline in a header value, ...
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # free text: tabs and line breaks pass


class _Converter:
    """Converts validated data into typed values; every failure becomes a ProfileError."""

    def __init__(self, file: str, lines: dict[str, int]) -> None:
        self.file, self.lines = file, lines

    def fail(self, path: str, reason: str) -> ProfileError:
        return ProfileError(self.file, _line_of(self.lines, path), path, _squeeze(reason))

    def expected(self, path: str, expect: str, value: Any) -> ProfileError:
        quote = expect == "a string" and not isinstance(value, (str, list, dict))
        hint = " (put it in quotes)" if quote else ""
        return self.fail(path, f"expected {expect}, got {show(value)}{hint}")

    def dataclass(self, cls: type[T], data: Any, path: str) -> T:
        if data is None and path:
            raise self.fail(path, "expected a mapping, got null (an empty section: remove it or write {})")
        if not isinstance(data, dict):
            raise self.expected(path, "a mapping", data)
        fields = settable_fields(cls)
        hints = _hints(cls)
        for key in data:
            if not isinstance(key, str):
                raise self.fail(path, f"keys must be strings, got {show(key)}")
            if key not in fields:
                raise self.fail(_join(path, key), _unknown_key(key, list(fields)))
        for name, f in fields.items():
            if name not in data and f.default is f.default_factory is dataclasses.MISSING:
                raise self.fail(path, f"missing required key {name!r}")
        kwargs = {name: self.value(hints[name], value, _join(path, name), fields[name].metadata)
                  for name, value in data.items()}  # in file order, so the first error is first
        try:
            obj = cls(**kwargs)
        except (TypeError, ValueError) as e:
            raise self.fail(path, str(e)) from None
        check = getattr(obj, "check", None)
        problems = check() if callable(check) else []
        if problems:
            key, reason = problems[0]
            raise self.fail(_join(path, key), reason)
        return obj

    def value(self, tp: Any, value: Any, path: str, meta: Any, expect: str | None = None) -> Any:
        if tp is Any:  # a JSON value passed through as written (an engine's own request keys)
            return self.json_value(value, path)
        origin, args = get_origin(tp), get_args(tp)
        if origin in (Union, types.UnionType):
            return self.union(tp, args, value, path, meta)
        if origin is Literal:
            if any(value == a and type(value) is type(a) for a in args):
                return value
            close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise self.fail(path, f"expected {expect or describe(tp, meta)}, got {show(value)}{hint}")
        if origin is tuple:
            if not isinstance(value, list):
                raise self.expected(path, expect or describe(tp, meta), value)
            return tuple(self.value(args[0], v, f"{path}[{i}]", meta) for i, v in enumerate(value))
        if origin is dict:
            if not isinstance(value, dict):
                raise self.expected(path, expect or describe(tp, meta), value)
            bad_key = next((k for k in value if isinstance(k, str) and _CONTROL.search(k)), None)
            if bad_key is not None:
                raise self.fail(path, f"control character in key {show(bad_key)}: not allowed in a setting")
            return {k: self.value(args[1], v, _join(path, k), meta) for k, v in value.items()}
        if dataclasses.is_dataclass(tp):
            return self.dataclass(tp, value, path)  # type: ignore[arg-type]
        expect = expect or describe(tp, meta)
        if tp is str and isinstance(value, str):
            bad = (_CONTROL_BUT_LINES if (meta or {}).get("free_text") else _CONTROL).search(value)
            if bad is not None:
                raise self.fail(path, f"control character {bad.group()!r} at position {bad.start()} of "
                                f"{show(value)}: not allowed in a setting")
            choices = _choices(meta)
            if choices is not None and value not in choices:
                close = difflib.get_close_matches(value, choices, n=1)
                raise self.fail(path, f"expected {expect}, got {show(value)}"
                                + (f" (did you mean {close[0]!r}?)" if close else ""))
            return value
        if tp is bool and isinstance(value, bool):
            return value
        if tp is str and isinstance(value, _ExponentFloat):
            choices = _choices(meta)
            if choices is not None and value.text not in choices:
                raise self.fail(path, f"expected {expect}, got {show(value.text)}")
            return value.text
        if tp in (int, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
            number = _as_number(tp, value)
            if number is not None and _in_bounds(number, meta):
                return number
        raise self.expected(path, expect, value)

    def json_value(self, value: Any, path: str) -> Any:
        """`value` when JSON can carry it: mappings with string keys, lists, strings, finite
        numbers, booleans and null (the YAML reader gives dates and times as their text)."""
        if isinstance(value, dict):  # (the YAML reader refuses a key that is not a string)
            return {k: self.json_value(v, _join(path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, _ExponentFloat):
            return float(value.text)
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(path, f"{value} cannot be sent as JSON")
        if value is None or isinstance(value, (str, bool, int, float)):
            return value
        raise self.fail(path, f"expected a JSON value (a mapping, list, string, number, true/false or null), "
                        f"got {type(value).__name__} {show(value)}")

    def union(self, tp: Any, args: tuple[Any, ...], value: Any, path: str, meta: Any) -> Any:
        if value is None and type(None) in args:
            return None
        arms = [a for a in args if a is not type(None)]
        if len(arms) == 1:
            return self.value(arms[0], value, path, meta)
        expect = describe(tp, meta)
        shaped = [a for a in arms if _shape(a) is _shape(type(value))]  # list, mapping or scalar
        if len(shaped) == 1:
            return self.value(shaped[0], value, path, meta, expect)
        for arm in shaped:
            try:
                return self.value(arm, value, path, meta, expect)
            except ProfileError:
                continue
        raise self.expected(path, expect, value)


def _shape(tp: Any) -> type | None:
    if get_origin(tp) in (tuple, list) or tp is list:
        return list
    return dict if get_origin(tp) is dict or tp is dict or dataclasses.is_dataclass(tp) else None


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved type hints of dataclass `cls`, worked out once per class (not to be mutated)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls)
    return hints


def settable_fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    """The fields of dataclass `cls` that YAML may set (init fields not marked `internal`)."""
    return {f.name: f for f in dataclasses.fields(cls)
            if f.init and not f.metadata.get("internal")}


def _as_number(tp: type, value: int | float) -> int | float | None:
    """`value` as `tp` (int or float), or None: no NaN, no infinity, no fractional int."""
    if tp is int:
        if isinstance(value, int):
            return value
        return int(value) if math.isfinite(value) and value.is_integer() else None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _in_bounds(x: float, meta: Any) -> bool:
    lo, hi, ex = meta.get("min"), meta.get("max"), meta.get("exclusive_min")
    return (lo is None or x >= lo) and (hi is None or x <= hi) and (ex is None or x > ex)


def _unknown_key(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"unknown key {key!r} (did you mean {close[0]!r}?)"
    return f"unknown key {key!r} (valid keys: {', '.join(valid)})"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def line_of_key(file: Path, path: str) -> int | None:
    """The line of key `path` in a YAML file already loaded once (None if it cannot be read now)."""
    try:
        _, lines = parse_yaml(file.read_bytes().decode("utf-8-sig"), file=str(file))
    except (OSError, UnicodeDecodeError, ProfileError):
        return None
    return _line_of(lines, path)


def _line_of(lines: dict[str, int], path: str) -> int | None:
    """The line of `path`, else of its nearest enclosing key or list item that is written."""
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return lines.get("")


def _squeeze(text: str) -> str:
    """Runs of whitespace, newlines included, as one space."""
    return " ".join(text.split())


def show(value: Any) -> str:
    """A short, one-line rendering of a YAML value for error messages."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    return repr(value[:57] + "..." if isinstance(value, str) and len(value) > 60 else value)


# ------------------------------------------------------------------------------------ describing


_NOUNS = {bool: ("true or false", "booleans"), int: ("an integer", "integers"),
          float: ("a number", "numbers"), str: ("a string", "strings")}


def describe(tp: Any, meta: Any = None, many: bool = False) -> str:
    """What a value (or with `many`, values) of annotation `tp` must be: "an integer >= 1"."""
    meta = meta or {}
    if tp is Any:
        return "JSON values" if many else "a JSON value"
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        if len(arms) == 2 and get_origin(arms[1]) is tuple and get_args(arms[1])[0] == arms[0]:
            return f"{describe(arms[0], meta, many)} or a list of them"
        return " or ".join(describe(a, meta, many) for a in arms)
    if origin is Literal:
        return ("values from " if many else "one of ") + ", ".join(repr(a) for a in args)
    if origin is tuple:
        return "a list of " + describe(args[0], meta, True)
    if origin is dict:
        return "a mapping of string keys to " + describe(args[1], meta, True)
    if dataclasses.is_dataclass(tp):
        return "mappings" if many else "a mapping"
    if tp not in _NOUNS:
        raise TypeError(f"typed_yaml does not support the annotation {tp!r}")
    choices = _choices(meta) if tp is str else None
    if choices is not None:
        return ("values from " if many else "one of ") + ", ".join(repr(a) for a in choices)
    return _NOUNS[tp][many] + (_bounds_text(meta) if tp in (int, float) else "")


def _choices(meta: Any) -> tuple[str, ...] | None:
    """The values a `str` field allows (its `one_of` function's), or None for any string."""
    one_of = meta.get("one_of") if meta else None
    return None if one_of is None else tuple(one_of())


def _bounds_text(meta: Any) -> str:
    lo, hi, ex = meta.get("min"), meta.get("max"), meta.get("exclusive_min")
    if (lo is not None or ex is not None) and hi is not None:
        return f" in {'[' if ex is None else '('}{_num(lo if ex is None else ex)}, {_num(hi)}]"
    if lo is not None:
        return f" >= {_num(lo)}"
    if ex is not None:
        return f" > {_num(ex)}"
    return f" <= {_num(hi)}" if hi is not None else ""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


# ------------------------------------------------------------------------------------ JSON Schema


def json_schema(cls: type, *, title: str | None = None) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) for YAML files that `load_dataclass(cls, ...)` accepts.

    Nested dataclasses go to `$defs` and are referenced with `$ref` (recursion works); the root's
    properties are inlined unless the root is itself referenced.
    """
    defs: dict[str, dict[str, Any]] = {}
    refs: set[str] = set()
    _object_schema(cls, defs, refs)
    schema: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    if title:
        schema["title"] = title
    if cls.__name__ in refs:
        schema["$ref"] = f"#/$defs/{cls.__name__}"
    else:
        schema.update(defs.pop(cls.__name__))
    if defs:
        schema["$defs"] = dict(sorted(defs.items()))
    return schema


def _object_schema(cls: type, defs: dict[str, dict[str, Any]], refs: set[str]) -> None:
    if cls.__name__ in defs:
        return
    node: dict[str, Any] = {"type": "object"}
    defs[cls.__name__] = node
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
        node["description"] = _squeeze(cls.__doc__)
    props: dict[str, Any] = {}
    required = []
    hints = _hints(cls)
    for name, f in settable_fields(cls).items():
        prop = _type_schema(hints[name], f.metadata, defs, refs)
        if "help" in f.metadata:
            prop["description"] = f.metadata["help"]
        if f.default is f.default_factory is dataclasses.MISSING:
            required.append(name)
        else:
            default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            with contextlib.suppress(TypeError, ValueError):  # left out if not JSON-serializable
                prop["default"] = json.loads(json.dumps(default, allow_nan=False, default=_changed))
        props[name] = prop
    node.update(properties=props, additionalProperties=False)
    if required:
        node["required"] = required


def _type_schema(tp: Any, meta: Any, defs: dict[str, dict[str, Any]], refs: set[str]) -> dict[str, Any]:
    if tp is Any:
        return {}  # any JSON value
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        return {"anyOf": [_type_schema(a, meta, defs, refs) for a in args]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin is tuple:
        return {"type": "array", "items": _type_schema(args[0], meta, defs, refs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1], meta, defs, refs)}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        refs.add(tp.__name__)
        _object_schema(tp, defs, refs)
        return {"$ref": f"#/$defs/{tp.__name__}"}
    if tp is type(None):
        return {"type": "null"}
    kind = {bool: "boolean", int: "integer", float: "number", str: "string"}.get(tp)
    if kind is None:
        raise TypeError(f"typed_yaml does not support the annotation {tp!r}")
    out: dict[str, Any] = {"type": kind}
    if tp is str and (choices := _choices(meta)) is not None:
        out["enum"] = list(choices)
    if tp in (int, float):
        for key, word in (("min", "minimum"), ("max", "maximum"), ("exclusive_min", "exclusiveMinimum")):
            if meta.get(key) is not None:
                out[word] = meta[key]
    return out


def _changed(obj: Any) -> dict[str, Any]:
    """A dataclass instance as the mapping of its settable fields that differ from the defaults."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"not JSON-serializable: {obj!r}")
    try:
        blank: Any = type(obj)()
    except TypeError:  # required fields: show them all
        blank = None
    return {name: getattr(obj, name) for name in settable_fields(type(obj))
            if blank is None or getattr(obj, name) != getattr(blank, name)}
