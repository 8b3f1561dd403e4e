"""Read a queues.yaml document into plain Python data, within bounds an outsider cannot push past.

A configuration comes from whoever registers a resource manager (in-process, over gRPC, over REST, from
a file), and korral parses it on that caller's thread: what it costs must not depend on how hostile
the text is. So before anything is built from it:

- the text is at most ``MAX_CONFIG_BYTES`` (10 MiB, UTF-8);
- YAML maps and lists nest at most ``MAX_NESTING_DEPTH`` deep (PyYAML composes recursively: deeper
  would be a ``RecursionError``, not a verdict);
- the document, with every alias expanded, holds at most ``MAX_YAML_NODES`` nodes: an alias costs
  nothing to compose but everything built from the data walks it expanded, so a 600-byte "billion
  laughs" would take minutes and gigabytes. The count is kept as the document is composed (each anchored
  node's expanded size is remembered), so such a document is refused after reading its few lines;
- an alias to a node that contains it (a recursive structure) is refused: no config is infinite.

Each refusal is a ``ConfigError`` that names the limit. Go's yaml.v3 (YuniKorn's parser) bounds aliases
by a ratio instead; no real YuniKorn config comes near any of these bounds.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, CollectionStartEvent
from yaml.resolver import Resolver

from korral.errors import KORRAL_BOUND, ConfigError, ConfigLimitError

MAX_CONFIG_BYTES = 10 * 1024 * 1024
MAX_NESTING_DEPTH = 100
MAX_YAML_NODES = 3_000_000


def too_large(size: int | None) -> str:
    """Why a config of ``size`` bytes (None: of unknown size, known to be over) is refused."""
    shown = "more" if size is None else f"{size:,}"
    return (
        f"configuration too large: {shown} bytes, over the limit of {MAX_CONFIG_BYTES:,} bytes (10 MiB)"
        + KORRAL_BOUND
    )


def read_yaml(text: str) -> Any:
    """The data of one YAML document, strictly (no duplicate keys) and within the bounds above."""
    if len(text) > MAX_CONFIG_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_CONFIG_BYTES:
        raise ConfigLimitError(too_large(len(text.encode("utf-8", "surrogatepass"))))
    try:
        loader = _BoundedLoader(text)  # safe constructors only (what yaml.load does with a Loader)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except Exception as err:
        if not _is(err, yaml.YAMLError):  # by name: libyaml may raise the first import's classes (_is)
            raise
        if "maximum nesting depth" in str(err):  # libyaml's own bound (1,000) met before ours
            raise ConfigLimitError(
                f"configuration nested too deep: maps and lists more than {MAX_NESTING_DEPTH} levels deep "
                f"(the limit is {MAX_NESTING_DEPTH})"
            ) from None
        raise ConfigError(f"invalid YAML: {_one_line(err)}") from None


def _one_line(err: Exception) -> str:
    """A YAML error on one line (api.md: an error is one line): what is wrong, where, in what."""
    problem = getattr(err, "problem", None)
    if not problem:
        return " ".join(str(err).split())
    mark = getattr(err, "problem_mark", None)
    context = getattr(err, "context", None)
    where = f' in "{mark.name}", line {mark.line + 1}, column {mark.column + 1}' if mark is not None else ""
    begun = getattr(err, "context_mark", None)
    if context and begun is not None:
        context = f"{context} begun at line {begun.line + 1}, column {begun.column + 1}"
    return f"{problem}{where}" + (f" ({context})" if context else "")


# event or error class -> the names of it and its bases
_EVENT_KINDS: dict[type, frozenset[str]] = {}


def _is(event: object, *classes: type) -> bool:
    """``isinstance`` by class name. libyaml's parser (a C extension, initialised once per process)
    makes its events from the ``yaml.events`` it first imported; when ``yaml`` is imported again (as
    pytest-cov's ``--cov=PACKAGE`` does, having imported and dropped it to find the package), its
    classes are new ones and every ``isinstance`` with them fails: every config failed to parse."""
    kind = type(event)
    names = _EVENT_KINDS.get(kind)
    if names is None:
        names = _EVENT_KINDS[kind] = frozenset(base.__name__ for base in kind.__mro__)
    return any(cls.__name__ in names for cls in classes)


def _line(event: Any) -> str:
    mark = getattr(event, "start_mark", None)
    return f" at line {mark.line + 1}" if mark is not None else ""


class _BoundedComposer(Composer):
    """PyYAML's composer, counting nesting and expanded nodes as it goes (see the module's text)."""

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        self._nodes = 0
        # each finished anchored node's size with its aliases expanded; an anchor not in here yet but
        # in self.anchors is still being composed
        self._sizes: dict[str, int] = {}

    def _add(self, count: int, event: Any, alias: str | None) -> None:
        self._nodes += count
        if self._nodes > MAX_YAML_NODES:
            if alias is not None:
                raise ConfigLimitError(
                    f"YAML aliases expand the configuration past the limit of {MAX_YAML_NODES:,} nodes "
                    f"(alias *{alias}{_line(event)})"
                )
            raise ConfigLimitError(
                f"configuration too large: more than the limit of {MAX_YAML_NODES:,} YAML nodes{_line(event)}"
            )

    peek_event: Any  # the parser's, mixed in by _BoundedLoader

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if _is(event, AliasEvent):
            anchor = str(event.anchor)
            size = self._sizes.get(anchor)
            if size is None and anchor in self.anchors:
                raise ConfigLimitError(
                    f"YAML alias *{anchor}{_line(event)} refers to a node that contains it (no recursion)"
                )
            node = super().compose_node(parent, index)  # an undefined alias is PyYAML's error
            self._add(size or 0, event, anchor)
            return node
        collection = _is(event, CollectionStartEvent)
        if collection:
            self._depth += 1
            if self._depth > MAX_NESTING_DEPTH:
                raise ConfigLimitError(
                    f"configuration nested too deep: maps and lists more than {MAX_NESTING_DEPTH} levels "
                    f"deep{_line(event)} (the limit is {MAX_NESTING_DEPTH})"
                )
        before = self._nodes
        node = super().compose_node(parent, index)
        if collection:
            self._depth -= 1
        self._add(1, event, None)
        if event.anchor is not None:
            self._sizes[event.anchor] = self._nodes - before
        return node


def _construct_unique_mapping(loader: Any, node: yaml.MappingNode) -> dict[Any, Any]:
    """A map, refusing a duplicate key as Go's yaml.v3 does (keys merged in with ``<<`` may be overridden)."""
    seen: set[Hashable] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        if isinstance(key, Hashable):
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
    mapping: dict[Any, Any] = loader.construct_mapping(node)  # PyYAML's stubs: Any
    return mapping


class _PythonParser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):
    """PyYAML's own event parser, as one class taking the stream (CParser's shape)."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)


# libyaml's event parser when PyYAML has it (3x faster than PyYAML's own), under PyYAML's composer;
# checked as the Python parser, whose interface it has (PyYAML's stubs do not describe CParser)
if TYPE_CHECKING:
    _Parser = _PythonParser
else:
    try:
        from yaml.cyaml import CParser as _Parser
    except ImportError:  # pragma: no cover - PyYAML built without libyaml
        _Parser = _PythonParser


class _BoundedLoader(_BoundedComposer, _Parser, SafeConstructor, Resolver):
    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        _BoundedComposer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)

    def check_event(self, *choices: Any) -> bool:  # event classes (PyYAML's stubs: isinstance's)
        event = self.peek_event()
        if event is None:
            return False
        return not choices or _is(event, *choices)


class LongInteger(str):
    """A YAML integer too long for any of YuniKorn's Go integer types (over ``LONG_INTEGER_DIGITS``
    digits), kept as its text: Go reads it into a string field as that text (a queue property, a
    quantity, which then judge it) and refuses it for an integer field. Never converted, so its length
    costs nothing (Python refuses to convert more than 4,300 digits at all)."""


LONG_INTEGER_DIGITS = 40


def _construct_int(loader: Any, node: yaml.ScalarNode) -> int | LongInteger:
    text = str(loader.construct_scalar(node))
    if len(text.replace("_", "").lstrip("+-")) > LONG_INTEGER_DIGITS:
        return LongInteger(text)
    value: int = loader.construct_yaml_int(node)
    return value


_BoundedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)
_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)

__all__ = [
    "LONG_INTEGER_DIGITS",
    "MAX_CONFIG_BYTES",
    "MAX_NESTING_DEPTH",
    "MAX_YAML_NODES",
    "LongInteger",
    "read_yaml",
    "too_large",
]
