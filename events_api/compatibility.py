"""Schema compatibility rules: may a new version of an event type's JSON Schema follow the previous ones?

The semantics are Confluent Schema Registry's, applied to JSON Schema. Schema S1 *fits into* S2 when every
instance valid under S1 is valid under S2. BACKWARD (consumers on the new schema read old data) means old
fits into new; FORWARD (consumers on an old schema read new data) means new fits into old; FULL is both;
the _TRANSITIVE modes check against every earlier version instead of only the latest; NONE checks nothing.

The comparison is structural, keyword by keyword, and conservative: whatever it cannot prove (a changed
`pattern`, differing oneOf/not/if/contains, unevaluated* beside in-place applicators, unresolvable `$ref`)
is a finding that breaks the checked direction(s), never silently compatible. Local `$ref`s (`#/$defs/x`,
`#/definitions/x`, any pointer into the same document) are followed, each (old, new) pair of locations
compared once, so recursive schemas terminate.

Lenient policy (what users expect): adding or removing an OPTIONAL property of an open object
(additionalProperties absent or true) is compatible both ways, although strictly an old instance could
have carried that property with another value; `strictly_fits_into` drops this exception. A changed
`format` counts as breaking although 2019-09 and later treat it as an annotation by default: a validator
may be configured to assert formats. Unknown keywords are annotations and are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final, NamedTuple, TypeGuard
from urllib.parse import unquote

MODES = ("NONE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")
BACKWARD: Final = "BACKWARD"
FORWARD: Final = "FORWARD"
_BOTH: Final = frozenset({BACKWARD, FORWARD})

_ANNOTATIONS: Final = frozenset(
    {
        "$schema", "$id", "id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$comment", "$defs", "definitions",
        "$vocabulary", "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
    }
)  # fmt: skip
# Annotations that only document: ignored when deciding whether two subschemas are identical.
_DOCUMENTATION: Final = frozenset(
    {"title", "description", "$comment", "default", "examples", "deprecated", "readOnly", "writeOnly"}
)
# Keywords whose annotations unevaluatedProperties/unevaluatedItems look through.
_IN_PLACE: Final = frozenset(
    {"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies", "$ref"}
    | {"$dynamicRef", "$recursiveRef"}
)
_SCHEMA_KEYWORDS: Final = (
    "additionalProperties", "additionalItems", "items", "contains", "propertyNames", "not", "if", "then", "else",
    "unevaluatedProperties", "unevaluatedItems", "contentSchema",
)  # fmt: skip
_SCHEMA_LIST_KEYWORDS: Final = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_MAP_KEYWORDS: Final = (
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
)
_TYPE_ORDER: Final = ("object", "array", "string", "number", "integer", "boolean", "null")
_ANY_TYPE: Final = frozenset({"object", "array", "string", "number", "boolean", "null"})
_WITNESS: Final = {
    "object": "{}", "array": "[]", "string": '"a"', "number": "1.5", "integer": "1", "boolean": "true", "null": "null",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Finding:
    path: str  # JSON Pointer into the (new) schema, "" for the root
    rule: str  # e.g. "required-added", "type-narrowed", "enum-narrowed", "undecidable"
    direction: str  # "BACKWARD" or "FORWARD": which direction this breaks ("" from fits_into)
    message: str  # human-readable, names the path and the rule
    undecidable: bool = False
    against_version: int | None = None  # filled by check_compatibility


def fits_into(narrow: object, wide: object) -> list[Finding]:
    """Ways an instance valid under `narrow` may be invalid under `wide` (empty list = fits), lenient policy."""
    return _fits(narrow, wide, lenient=True)


def strictly_fits_into(narrow: object, wide: object) -> list[Finding]:
    """Like `fits_into`, without the lenient policy for optional properties of open objects."""
    return _fits(narrow, wide, lenient=False)


def check_compatibility(mode: str, new: object, previous: Sequence[tuple[int, object]]) -> list[Finding]:
    """`previous` = [(version, schema), ...] oldest first. Non-transitive modes check against the last one only;
    _TRANSITIVE against every one. Returns the findings that break the mode, each with direction and
    against_version set. Raises ValueError for an unknown mode."""
    directions = _directions(mode)
    against = previous if mode.endswith("_TRANSITIVE") else previous[-1:]
    if not directions:
        return []
    return [
        Finding(raw.path, raw.rule, raw.direction, _message(raw, version), raw.undecidable, version)
        for version, old in against
        for raw in _Comparison(old, new).run(directions)
    ]


def _directions(mode: str) -> frozenset[str]:
    if mode not in MODES:
        raise ValueError(f"unknown compatibility mode {mode!r}; expected one of {', '.join(MODES)}")
    base = mode.removesuffix("_TRANSITIVE")
    return _BOTH if base == "FULL" else frozenset() if base == "NONE" else frozenset({base})


def _fits(narrow: object, wide: object, *, lenient: bool) -> list[Finding]:
    found = _Comparison(narrow, wide, lenient=lenient).run(frozenset({BACKWARD}))
    return [Finding(raw.path, raw.rule, "", _message(raw, None), raw.undecidable) for raw in found]


# --- findings and messages -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Raw:
    """A finding before it is told which version it was found against."""

    path: str
    rule: str
    direction: str
    detail: str  # what changed, e.g. "type narrowed from number to integer"
    hint: str | None  # completes "data ... may ___", e.g. "hold 1.5"; None when undecidable
    undecidable: bool


def _message(raw: _Raw, version: int | None) -> str:
    where = f"{raw.path or '(root)'}: {raw.detail} ({raw.rule}"
    if version is None:
        why = (
            "containment cannot be proven"
            if raw.hint is None
            else f"a value valid under the narrow schema may {raw.hint}"
        )
        return f"{where}: {why})"
    if raw.hint is None:
        return f"{where}; treated as breaking {raw.direction} against version {version}: containment cannot be proven)"
    if raw.direction == BACKWARD:
        return f"{where}; breaks BACKWARD: data written with version {version} may {raw.hint})"
    return f"{where}; breaks FORWARD: new data may {raw.hint}, which version {version} rejects)"


def _show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _show_all(values: Sequence[Any]) -> str:
    shown = ", ".join(_show(v) for v in values[:3])
    return shown + (f" and {len(values) - 3} more" if len(values) > 3 else "")


# --- JSON values and schema documents ---------------------------------------------------------------------


def _canon(value: Any) -> Hashable:
    """A hashable form of a JSON value under JSON equality (1 == 1.0, but true != 1)."""
    if isinstance(value, dict):
        return ("object", frozenset((k, _canon(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_canon(v) for v in value))
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    return ("number", value)


def _schema_canon(schema: Any) -> Hashable:
    """A hashable form of a schema that ignores documentation and spells `true` as `{}`."""
    if not isinstance(schema, dict):
        return _schema_canon({}) if schema is True else _canon(schema)
    parts = []
    for key, value in schema.items():
        if key in _DOCUMENTATION:
            continue
        if isinstance(value, dict | bool) and key in _SCHEMA_KEYWORDS:
            parts.append((key, _schema_canon(value)))
        elif isinstance(value, list) and key in _SCHEMA_LIST_KEYWORDS:
            parts.append((key, tuple(_schema_canon(v) for v in value)))
        elif isinstance(value, dict) and key in _SCHEMA_MAP_KEYWORDS:
            parts.append((key, frozenset((k, _schema_canon(v)) for k, v in value.items())))
        else:
            parts.append((key, _canon(value)))
    return ("schema", frozenset(parts))


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _lookup(root: Any, pointer: str) -> tuple[bool, Any]:
    node = root
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False, None
    return True, node


def _children(node: Any, at: str) -> Iterator[tuple[Any, str]]:
    """The subschemas directly inside `node`, with their pointers."""
    if not isinstance(node, dict):
        return
    for kw in _SCHEMA_KEYWORDS:
        if isinstance(node.get(kw), dict | bool):
            yield node[kw], f"{at}/{kw}"
    for kw in _SCHEMA_LIST_KEYWORDS:
        if isinstance(node.get(kw), list):
            yield from ((s, f"{at}/{kw}/{i}") for i, s in enumerate(node[kw]) if isinstance(s, dict | bool))
    for kw in _SCHEMA_MAP_KEYWORDS:
        if isinstance(node.get(kw), dict):
            yield from ((s, f"{at}/{kw}/{_escape(k)}") for k, s in node[kw].items() if isinstance(s, dict | bool))


def _walk(node: Any, at: str) -> Iterator[tuple[Any, str]]:
    yield node, at
    for child, child_at in _children(node, at):
        yield from _walk(child, child_at)


def _sets_base(node: Any, legacy: bool) -> bool:
    if not isinstance(node, dict):
        return False
    ident = node.get("$id", node.get("id") if legacy else None)
    return isinstance(ident, str) and not ident.startswith("#")


@dataclass(frozen=True, slots=True)
class _Doc:
    """One schema document, for resolving its local `$ref`s."""

    root: Any
    base: str  # the root's $id without fragment, "" when it has none
    nested_ids: bool  # a subschema sets its own base URI, so "#..." inside it may not mean the root

    @classmethod
    def of(cls, root: object) -> _Doc:
        top = root if isinstance(root, dict) else {}
        dialect = top["$schema"] if isinstance(top.get("$schema"), str) else ""
        legacy = any(f"draft-0{n}" in dialect for n in (3, 4))
        ident = top.get("$id", top.get("id") if legacy else None)
        base = ident.split("#", 1)[0] if isinstance(ident, str) else ""
        nested = any(_sets_base(node, legacy) for node, at in _walk(root, "") if at)
        return cls(root, base, nested)

    def at(self, pointer: str) -> Any:
        return _lookup(self.root, pointer)[1]

    def target(self, ref: str) -> str | None:
        """The pointer a local `$ref` resolves to; None when it is not local or does not resolve."""
        if ref == "" or ref == self.base:
            ref = "#"
        elif self.base and ref.startswith(self.base + "#"):
            ref = ref[len(self.base) :]
        if not ref.startswith("#") or self.nested_ids:
            return None
        pointer = unquote(ref[1:])
        if pointer and not pointer.startswith("/"):
            return None  # a plain-name anchor
        found, node = _lookup(self.root, pointer)
        return pointer if found and isinstance(node, dict | bool) else None

    def external(self, ref: str) -> bool:
        """An absolute URI outside this document: the same string means the same schema."""
        return ":" in ref and self.target(ref) is None and not ref.startswith("#")

    def deref(self, node: Any, at: str) -> tuple[Any, str]:
        """Follow `$ref`s that stand alone (beside annotations only); a cycle or a non-local ref stops."""
        seen: set[str] = set()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            if any(k not in _ANNOTATIONS for k in node if k != "$ref"):
                break
            target = self.target(node["$ref"])
            if target is None or target in seen:
                break
            seen.add(target)
            node, at = self.at(target), target
        return node, at


@dataclass(slots=True)
class _Sameness:
    """Structural identity of two subschemas, including what their `$ref`s point to (co-inductively)."""

    old: _Doc
    new: _Doc
    identical_documents: bool  # then every reference means the same on both sides, whatever it is
    assumed: set[tuple[str, str]] = field(default_factory=set)

    def same(self, old: Any, new: Any) -> bool:
        if _schema_canon(old) != _schema_canon(new):
            return False
        return self.identical_documents or all(
            self._refs_same(node) for node, _ in _walk(old, "") if isinstance(node, dict)
        )

    def _refs_same(self, node: dict[str, Any]) -> bool:
        if "$dynamicRef" in node or "$recursiveRef" in node:
            return False
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return True
        old_at, new_at = self.old.target(ref), self.new.target(ref)
        if old_at is None or new_at is None:
            return old_at is None and new_at is None and self.old.external(ref) and self.new.external(ref)
        if (old_at, new_at) not in self.assumed:
            self.assumed.add((old_at, new_at))
            return self.same(self.old.at(old_at), self.new.at(new_at))
        return True


# --- what a single schema allows -------------------------------------------------------------------------


def _is_open(schema: Any) -> bool:
    """True for `true`, `{}` and schemas holding annotations only."""
    return schema is True or (isinstance(schema, dict) and all(k in _ANNOTATIONS for k in schema))


def _normalize(schema: Any) -> Any:
    """`true` as `{}`, and a schema that accepts nothing because of `not: {}` as `false`."""
    if schema is True:
        return {}
    if isinstance(schema, dict) and "not" in schema and _is_open(schema["not"]):
        return False
    return schema


def _value_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string" if isinstance(value, str) else "array" if isinstance(value, list) else "object"


def _covers(types: frozenset[str], kind: str) -> bool:
    return kind in types or (kind == "integer" and "number" in types)


def _declared_types(node: dict[str, Any]) -> frozenset[str]:
    declared = node.get("type")
    if isinstance(declared, str):
        return frozenset({declared})
    if isinstance(declared, list):
        return frozenset(t for t in declared if isinstance(t, str))
    return _ANY_TYPE


def _enum_values(node: Any) -> list[Any] | None:
    """The values `node` allows when `enum`/`const` make them a finite set (deduplicated, of allowed types)."""
    if not isinstance(node, dict):
        return None
    values: list[Any] | None = list(node["enum"]) if isinstance(node.get("enum"), list) else None
    if "const" in node:
        const = _canon(node["const"])
        values = [node["const"]] if values is None else [v for v in values if _canon(v) == const]
    if values is None:
        return None
    declared = _declared_types(node)
    unique = {_canon(v): v for v in values if _covers(declared, _value_type(v))}
    return list(unique.values())


def _types(node: dict[str, Any]) -> frozenset[str]:
    """The JSON types an instance of `node` may have ("number" includes "integer")."""
    values = _enum_values(node)
    return _declared_types(node) if values is None else frozenset(_value_type(v) for v in values)


def _admits(types: frozenset[str], category: str) -> bool:
    return category in types or (category == "number" and "integer" in types)


def _describe(types: frozenset[str]) -> str:
    if types >= _ANY_TYPE:
        return "any"
    names = [t for t in _TYPE_ORDER if t in types]
    return "nothing" if not names else names[0] if len(names) == 1 else "[" + ", ".join(names) + "]"


class _Bound(NamedTuple):
    value: int | float
    exclusive: bool
    keyword: str


def _lower(node: dict[str, Any]) -> _Bound | None:
    bounds, minimum, exclusive = [], node.get("minimum"), node.get("exclusiveMinimum")
    if _is_number(minimum):  # draft-04 spells an exclusive minimum as `exclusiveMinimum: true`
        bounds.append(_Bound(minimum, exclusive is True, "exclusiveMinimum" if exclusive is True else "minimum"))
    if _is_number(exclusive):
        bounds.append(_Bound(exclusive, True, "exclusiveMinimum"))
    return max(bounds, key=lambda b: (b.value, b.exclusive), default=None)


def _upper(node: dict[str, Any]) -> _Bound | None:
    bounds, maximum, exclusive = [], node.get("maximum"), node.get("exclusiveMaximum")
    if _is_number(maximum):
        bounds.append(_Bound(maximum, exclusive is True, "exclusiveMaximum" if exclusive is True else "maximum"))
    if _is_number(exclusive):
        bounds.append(_Bound(exclusive, True, "exclusiveMaximum"))
    return min(bounds, key=lambda b: (b.value, not b.exclusive), default=None)


def _stricter(a: _Bound | None, b: _Bound | None, *, lower: bool) -> bool:
    """Does bound `a` reject a number that bound `b` accepts?"""
    if a is None or b is None:
        return b is None and a is not None
    if a.value != b.value:
        return a.value > b.value if lower else a.value < b.value
    return a.exclusive and not b.exclusive


def _show_bound(bound: _Bound | None, *, lower: bool) -> str:
    if bound is None:
        return "none"
    return f"{'>' if lower else '<'}{'' if bound.exclusive else '='} {bound.value}"


def _outside(bound: _Bound, *, lower: bool) -> str:
    """A number the bound rejects, in words."""
    return f"hold a number {'<' if lower else '>'}{'=' if bound.exclusive else ''} {bound.value}"


def _multiple(node: dict[str, Any]) -> Fraction | None:
    value = node.get("multipleOf")
    return Fraction(str(value)) if _is_number(value) and value > 0 else None


def _count(node: dict[str, Any], keyword: str) -> int | float | None:
    value = node.get(keyword)
    return value if _is_number(value) else None


def _changed(keyword: str, old: Any, new: Any) -> str:
    if old is None:
        return f"{keyword} {_show(new)} added"
    if new is None:
        return f"{keyword} {_show(old)} removed"
    return f"{keyword} changed from {_show(old)} to {_show(new)}"


def _schema_map(node: dict[str, Any], keyword: str) -> dict[str, Any]:
    value = node.get(keyword)
    if not isinstance(value, dict):
        return {}
    return {k: s for k, s in value.items() if isinstance(s, dict | bool)}


def _dependent_required(node: dict[str, Any]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for keyword in ("dependentRequired", "dependencies"):  # draft-04..07 `dependencies` with name lists
        value = node.get(keyword)
        for name, names in value.items() if isinstance(value, dict) else ():
            if isinstance(names, list):
                found.setdefault(name, set()).update(n for n in names if isinstance(n, str))
    return found


def _dependent_schemas(node: dict[str, Any], at: str) -> dict[str, tuple[Any, str]]:
    found: dict[str, tuple[Any, str]] = {}
    for keyword in ("dependencies", "dependentSchemas"):  # draft-04..07 `dependencies` with schemas
        for name, schema in _schema_map(node, keyword).items():
            found[name] = (schema, f"{at}/{keyword}/{_escape(name)}")
    return found


def _required(node: dict[str, Any]) -> list[str]:
    value = node.get("required")
    return list(dict.fromkeys(n for n in value if isinstance(n, str))) if isinstance(value, list) else []


def _simple(node: dict[str, Any], keyword: str) -> bool:
    """Is `keyword` (unevaluatedProperties/Items) equivalent to additionalProperties/items here?"""
    return not any(k in node for k in _IN_PLACE) and (keyword != "unevaluatedItems" or "contains" not in node)


def _additional(node: dict[str, Any], at: str) -> tuple[Any, str]:
    """The schema for properties `node` does not declare (None when open), with its pointer."""
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        value = node.get(keyword)
        if isinstance(value, dict | bool) and (keyword == "additionalProperties" or _simple(node, keyword)):
            return (None if _is_open(value) else _normalize(value)), f"{at}/{keyword}"
    return None, f"{at}/additionalProperties"


def _names_within(node: dict[str, Any], declared: dict[str, Any]) -> bool:
    """Does `node` only allow property names that `declared` names (so undeclared ones never occur)?"""
    if _count(node, "maxProperties") == 0:
        return True
    names = _enum_values(node.get("propertyNames"))
    return names is not None and all(isinstance(n, str) and n in declared for n in names)


def _shape(node: dict[str, Any], at: str) -> tuple[list[tuple[Any, str]], tuple[Any, str]]:
    """Array items as (schemas by position, schema for every later item), each with its pointer."""
    items = node.get("items")
    prefix_kw = (
        "prefixItems" if isinstance(node.get("prefixItems"), list) else "items" if isinstance(items, list) else ""
    )
    prefix = [(s, f"{at}/{prefix_kw}/{i}") for i, s in enumerate(node[prefix_kw])] if prefix_kw else []
    rest_kw = "additionalItems" if prefix_kw == "items" else "items"
    for keyword in (rest_kw, "unevaluatedItems"):
        value = node.get(keyword)
        if isinstance(value, dict | bool) and (keyword == rest_kw or _simple(node, keyword)):
            return prefix, (value, f"{at}/{keyword}")
    return prefix, (True, f"{at}/{rest_kw}")


def _branches(node: dict[str, Any], at: str, keyword: str) -> list[tuple[Any, str]] | None:
    value = node.get(keyword)
    if not isinstance(value, list):
        return None
    return [(s, f"{at}/{keyword}/{i}") for i, s in enumerate(value)]


def _conditional(node: dict[str, Any]) -> bool:
    return "if" in node and ("then" in node or "else" in node)


# --- the comparison --------------------------------------------------------------------------------------


class _Comparison:
    """One old schema document against one new one. Every check finds both ways the new schema may differ:
    BACKWARD (old data the new schema rejects) and FORWARD (new data the old schema rejects); `live` says
    which of the two still matter at a node."""

    def __init__(self, old: object, new: object, *, lenient: bool = True) -> None:
        self.old = _Doc.of(old)
        self.new = _Doc.of(new)
        self.lenient = lenient
        self.found: list[_Raw] = []
        self._done: dict[tuple[str, str], set[str]] = {}  # (old, new) pointer pairs: directions compared
        self._same: dict[tuple[str, str], bool] = {}
        self._identical_documents = _canon(old) == _canon(new)

    def run(self, live: frozenset[str]) -> list[_Raw]:
        self.compare(self.old.root, "", self.new.root, "", live)
        return list(dict.fromkeys(self.found))

    def compare(self, old: Any, old_at: str, new: Any, new_at: str, live: frozenset[str]) -> None:
        old, old_at = self.old.deref(old, old_at)
        new, new_at = self.new.deref(new, new_at)
        # `true` stands in for absent subschemas too, at made-up pointers: key it by value so that pairs
        # stay finite (a recursive $ref on one side against ever deeper absent keywords on the other).
        key = ("" if old is True else "#" + old_at, "" if new is True else "#" + new_at)
        done = self._done.setdefault(key, set())
        todo = live - done
        if not todo:
            return  # compared already, or being compared further up (a recursive $ref)
        done.update(todo)
        if self.same(old, old_at, new, new_at):
            return
        old, new = _normalize(old), _normalize(new)
        if old is False or new is False:
            self._false_schema(old, new, new_at, todo)
        elif not isinstance(old, dict) or not isinstance(new, dict):
            self._undecidable(todo, new_at, "a value that is not a schema changed")
        else:
            self._keywords(old, old_at, new, new_at, todo)

    def same(self, old: Any, old_at: str, new: Any, new_at: str) -> bool:
        key = (old_at, new_at)
        if key not in self._same:
            self._same[key] = _Sameness(self.old, self.new, self._identical_documents).same(old, new)
        return self._same[key]

    def _emit(
        self,
        live: frozenset[str],
        direction: str,
        path: str,
        rule: str,
        detail: str,
        hint: str | None = None,
        *,
        undecidable: bool = False,
    ) -> None:
        if direction in live:
            self.found.append(_Raw(path, rule, direction, detail, hint, undecidable))

    def _undecidable(self, live: frozenset[str], path: str, detail: str) -> None:
        for direction in (BACKWARD, FORWARD):
            self._emit(live, direction, path, "undecidable", detail, undecidable=True)

    @staticmethod
    def _gate(live: frozenset[str], old: dict[str, Any], new: dict[str, Any], category: str) -> frozenset[str]:
        """The directions in which instances of `category` occur on the narrow side."""
        kinds = {BACKWARD: _types(old), FORWARD: _types(new)}
        return frozenset(d for d in live if _admits(kinds[d], category))

    def _keywords(self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        if not self._refs(o, n, np, live):
            return
        self._type(o, n, np, live)
        self._enum(o, n, np, live)
        if numbers := self._gate(live, o, n, "number"):
            self._bound(np, numbers, _lower(o), _lower(n), lower=True)
            self._bound(np, numbers, _upper(o), _upper(n), lower=False)
            self._multiple_of(o, n, np, numbers)
        if strings := self._gate(live, o, n, "string"):
            self._counts(o, n, np, strings, ("minLength", "maxLength"), ("a string", "characters"))
            self._pattern(o, n, np, strings)
            self._format(o, n, np, strings)
        if arrays := self._gate(live, o, n, "array"):
            self._arrays(o, op, n, np, arrays)
        if objects := self._gate(live, o, n, "object"):
            self._objects(o, op, n, np, objects)
        self._composition(o, op, n, np, live)

    def _false_schema(self, old: Any, new: Any, path: str, live: frozenset[str]) -> None:
        if new is False and old is not False:
            detail = "the schema became false and accepts nothing"
            self._emit(live, BACKWARD, path, "false-schema-added", detail, "hold any value here")
        if old is False and new is not False:
            detail = "the schema was false and now accepts values"
            self._emit(live, FORWARD, path, "false-schema-removed", detail, "hold any value here")

    def _refs(self, o: dict[str, Any], n: dict[str, Any], np: str, live: frozenset[str]) -> bool:
        """`$ref` beside other keywords: fine when both sides have one (compare the targets, then the rest)."""
        old_ref, new_ref = o.get("$ref"), n.get("$ref")
        if old_ref is None and new_ref is None:
            return True
        old_at = self.old.target(old_ref) if isinstance(old_ref, str) else None
        new_at = self.new.target(new_ref) if isinstance(new_ref, str) else None
        if old_at is None or new_at is None:
            self._undecidable(
                live, f"{np}/$ref", "$ref changed where it cannot be followed or stands beside other keywords"
            )
            return False
        self.compare(self.old.at(old_at), old_at, self.new.at(new_at), new_at, live)
        return True

    # generic keywords

    def _type(self, o: dict[str, Any], n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        if _enum_values(o) is not None and _enum_values(n) is not None:
            return  # the enum rule compares the very values
        old, new = _types(o), _types(n)
        lost = [t for t in _TYPE_ORDER if t in old and not _covers(new, t)]
        gained = [t for t in _TYPE_ORDER if t in new and not _covers(old, t)]
        change = "changed" if lost and gained else "narrowed" if lost else "widened"
        detail = f"type {change} from {_describe(old)} to {_describe(new)}"
        if lost:
            self._emit(live, BACKWARD, f"{np}/type", "type-narrowed", detail, f"hold {_WITNESS[lost[0]]}")
        if gained:
            self._emit(live, FORWARD, f"{np}/type", "type-widened", detail, f"hold {_WITNESS[gained[0]]}")

    def _enum(self, o: dict[str, Any], n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        old, new = _enum_values(o), _enum_values(n)
        if old is None and new is None:
            return
        keyword = "enum" if "enum" in (n if new is not None else o) else "const"
        path = f"{np}/{keyword}"
        if old is not None and new is not None:
            kept, had = {_canon(v) for v in new}, {_canon(v) for v in old}
            if missing := [v for v in old if _canon(v) not in kept]:
                detail = f"{keyword} no longer allows {_show_all(missing)}"
                self._emit(live, BACKWARD, path, "enum-narrowed", detail, f"hold {_show(missing[0])}")
            if extra := [v for v in new if _canon(v) not in had]:
                detail = f"{keyword} now also allows {_show_all(extra)}"
                self._emit(live, FORWARD, path, "enum-widened", detail, f"hold {_show(extra[0])}")
        elif new is not None:
            detail = f"{keyword} added, allowing only {_show_all(new)}"
            self._emit(live, BACKWARD, path, "enum-added", detail, f"hold a value outside the new {keyword}")
        elif old is not None:
            detail = f"{keyword} removed, which allowed only {_show_all(old)}"
            self._emit(live, FORWARD, path, "enum-removed", detail, f"hold a value outside the old {keyword}")

    # numbers and strings

    def _bound(self, np: str, live: frozenset[str], old: _Bound | None, new: _Bound | None, *, lower: bool) -> None:
        side = "lower" if lower else "upper"
        detail = f"{side} bound changed from {_show_bound(old, lower=lower)} to {_show_bound(new, lower=lower)}"
        if new is not None and _stricter(new, old, lower=lower):
            hint = _outside(new, lower=lower)
            self._emit(live, BACKWARD, f"{np}/{new.keyword}", f"{new.keyword}-tightened", detail, hint)
        if old is not None and _stricter(old, new, lower=lower):
            keyword = (new or old).keyword
            self._emit(live, FORWARD, f"{np}/{keyword}", f"{keyword}-loosened", detail, _outside(old, lower=lower))

    def _multiple_of(self, o: dict[str, Any], n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        old, new = _multiple(o), _multiple(n)
        breaks_backward = new is not None and (old is None or old % new != 0)
        breaks_forward = old is not None and (new is None or new % old != 0)
        kind = "changed" if breaks_backward and breaks_forward else "tightened" if breaks_backward else "loosened"
        detail, path = _changed("multipleOf", o.get("multipleOf"), n.get("multipleOf")), f"{np}/multipleOf"
        if breaks_backward:
            hint = f"hold a number that is not a multiple of {_show(n['multipleOf'])}"
            self._emit(live, BACKWARD, path, f"multipleOf-{kind}", detail, hint)
        if breaks_forward:
            hint = f"hold a number that is not a multiple of {_show(o['multipleOf'])}"
            self._emit(live, FORWARD, path, f"multipleOf-{kind}", detail, hint)

    def _counts(
        self,
        o: dict[str, Any],
        n: dict[str, Any],
        np: str,
        live: frozenset[str],
        keywords: tuple[str, str],
        noun: tuple[str, str],
    ) -> None:
        """minLength/maxLength, minItems/maxItems, minProperties/maxProperties."""
        (low, high), (what, unit) = keywords, noun
        old, new = _count(o, low), _count(n, low)
        detail = _changed(low, old, new)
        if (new or 0) > (old or 0):
            self._emit(live, BACKWARD, f"{np}/{low}", f"{low}-tightened", detail, f"hold {what} with < {new} {unit}")
        if (old or 0) > (new or 0):
            self._emit(live, FORWARD, f"{np}/{low}", f"{low}-loosened", detail, f"hold {what} with < {old} {unit}")
        old, new = _count(o, high), _count(n, high)
        detail, infinity = _changed(high, old, new), float("inf")
        if (infinity if new is None else new) < (infinity if old is None else old):
            self._emit(live, BACKWARD, f"{np}/{high}", f"{high}-tightened", detail, f"hold {what} with > {new} {unit}")
        if (infinity if old is None else old) < (infinity if new is None else new):
            self._emit(live, FORWARD, f"{np}/{high}", f"{high}-loosened", detail, f"hold {what} with > {old} {unit}")

    def _pattern(self, o: dict[str, Any], n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        old, new = o.get("pattern"), n.get("pattern")
        old, new = (old if isinstance(old, str) else None), (new if isinstance(new, str) else None)
        if old == new:
            return
        path, detail = f"{np}/pattern", _changed("pattern", old, new)
        if old is None:
            self._emit(live, BACKWARD, path, "pattern-added", detail, f"hold a string not matching {_show(new)}")
        elif new is None:
            self._emit(live, FORWARD, path, "pattern-removed", detail, f"hold a string not matching {_show(old)}")
        else:  # regular expressions cannot be compared: neither containment can be proven
            detail += "; regular expressions cannot be compared"
            for direction in (BACKWARD, FORWARD):
                self._emit(live, direction, path, "pattern-changed", detail, undecidable=True)

    def _format(self, o: dict[str, Any], n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        old, new = o.get("format"), n.get("format")
        old, new = (old if isinstance(old, str) else None), (new if isinstance(new, str) else None)
        if old == new:
            return
        path, detail = f"{np}/format", _changed("format", old, new)
        if old is None:
            self._emit(live, BACKWARD, path, "format-added", detail, f"hold a string that is not a valid {new}")
        elif new is None:
            self._emit(live, FORWARD, path, "format-removed", detail, f"hold a string that is not a valid {old}")
        else:
            self._emit(live, BACKWARD, path, "format-changed", detail, f"hold a valid {old} that is not a valid {new}")
            self._emit(live, FORWARD, path, "format-changed", detail, f"hold a valid {new} that is not a valid {old}")

    # arrays

    def _arrays(self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        (old_prefix, old_rest), (new_prefix, new_rest) = _shape(o, op), _shape(n, np)
        for i in range(max(len(old_prefix), len(new_prefix))):
            old = old_prefix[i] if i < len(old_prefix) else old_rest
            new = new_prefix[i] if i < len(new_prefix) else new_rest
            self.compare(*old, *new, live)
        self.compare(*old_rest, *new_rest, live)
        self._counts(o, n, np, live, ("minItems", "maxItems"), ("an array", "items"))
        old_unique, new_unique, path = o.get("uniqueItems") is True, n.get("uniqueItems") is True, f"{np}/uniqueItems"
        if new_unique and not old_unique:
            detail, hint = "uniqueItems turned on", "hold an array with duplicate items"
            self._emit(live, BACKWARD, path, "uniqueItems-tightened", detail, hint)
        if old_unique and not new_unique:
            detail, hint = "uniqueItems turned off", "hold an array with duplicate items"
            self._emit(live, FORWARD, path, "uniqueItems-loosened", detail, hint)
        self._contains(o, op, n, np, live)
        self._unevaluated(o, n, np, live, "unevaluatedItems")

    def _contains(self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        counts = ("minContains", "maxContains")
        if (
            "contains" in o
            and "contains" in n
            and all(_canon(o.get(k)) == _canon(n.get(k)) for k in counts)
            and self.same(o["contains"], f"{op}/contains", n["contains"], f"{np}/contains")
        ):
            return
        for wide, direction in ((n, BACKWARD), (o, FORWARD)):
            if "contains" in wide:
                detail = "contains/minContains/maxContains changed"
                self._emit(live, direction, f"{np}/contains", "undecidable", detail, undecidable=True)

    def _unevaluated(self, o: dict[str, Any], n: dict[str, Any], np: str, live: frozenset[str], keyword: str) -> None:
        """unevaluated* beside in-place applicators depends on them all: undecidable where that side is wide."""
        for wide, direction in ((n, BACKWARD), (o, FORWARD)):
            if keyword in wide and not _is_open(wide[keyword]) and not _simple(wide, keyword):
                detail = f"{keyword} beside in-place applicators"
                self._emit(live, direction, f"{np}/{keyword}", "undecidable", detail, undecidable=True)

    # objects

    def _objects(self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        self._pattern_properties(o, op, n, np, live)
        old_props, new_props = _schema_map(o, "properties"), _schema_map(n, "properties")
        for name in [*old_props, *(k for k in new_props if k not in old_props)]:
            old_at, new_at = f"{op}/properties/{_escape(name)}", f"{np}/properties/{_escape(name)}"
            if name in old_props and name in new_props:
                self.compare(old_props[name], old_at, new_props[name], new_at, live)
            elif name in old_props:
                self._removed_property(name, (old_props[name], old_at), n, np, new_at, live)
            else:
                self._added_property(name, o, op, (new_props[name], new_at), live)
        self._additional_properties(o, op, n, np, live)
        self._required(o, n, np, live)
        self._counts(o, n, np, live, ("minProperties", "maxProperties"), ("an object", "properties"))
        self._dependencies(o, op, n, np, live)
        old_names, new_names = o.get("propertyNames", True), n.get("propertyNames", True)
        self.compare(old_names, f"{op}/propertyNames", new_names, f"{np}/propertyNames", live)
        self._unevaluated(o, n, np, live, "unevaluatedProperties")

    def _removed_property(
        self, name: str, old: tuple[Any, str], n: dict[str, Any], np: str, path: str, live: frozenset[str]
    ) -> None:
        """A property only the old schema declares: the new one validates it with additionalProperties."""
        additional, additional_at = _additional(n, np)
        if self.old.deref(*old)[0] is False or (self.lenient and additional is None):
            return  # never present in old data, or the lenient policy
        if _schema_map(n, "patternProperties"):
            self._undecidable(live, path, f"property {name!r} removed and new patternProperties may match it")
        elif additional is False:
            detail = f"property {name!r} removed while additionalProperties is false"
            self._emit(live, BACKWARD, path, "property-removed", detail, f"carry property {name!r}")
        else:
            self.compare(*old, True if additional is None else additional, additional_at, live)

    def _added_property(
        self, name: str, o: dict[str, Any], op: str, new: tuple[Any, str], live: frozenset[str]
    ) -> None:
        """A property only the new schema declares: the old one validated it with additionalProperties."""
        additional, additional_at = _additional(o, op)
        if self.new.deref(*new)[0] is False or (self.lenient and additional is None):
            return  # never present in new data, or the lenient policy
        if _schema_map(o, "patternProperties"):
            self._undecidable(live, new[1], f"property {name!r} added and old patternProperties may match it")
        elif additional is False:
            detail = f"property {name!r} added while the old schema has additionalProperties false"
            self._emit(live, FORWARD, new[1], "property-added", detail, f"carry property {name!r}")
        else:
            self.compare(True if additional is None else additional, additional_at, *new, live)

    def _additional_properties(
        self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]
    ) -> None:
        (old, old_at), (new, new_at) = _additional(o, op), _additional(n, np)
        old, new = (True if old is None else old), (True if new is None else new)
        if new is False and old is not False:
            if not _names_within(o, _schema_map(n, "properties")):
                detail, hint = "additionalProperties became false", "carry a property the new schema does not declare"
                self._emit(live, BACKWARD, new_at, "additional-properties-closed", detail, hint)
        elif old is False and new is not False:
            if not _names_within(n, _schema_map(o, "properties")):
                detail, hint = (
                    "additionalProperties is no longer false",
                    "carry a property the old schema does not declare",
                )
                self._emit(live, FORWARD, new_at, "additional-properties-opened", detail, hint)
        else:
            self.compare(old, old_at, new, new_at, live)

    def _pattern_properties(self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        old, new = _schema_map(o, "patternProperties"), _schema_map(n, "patternProperties")
        for key in (k for k in old if k in new):
            at = f"/patternProperties/{_escape(key)}"
            self.compare(old[key], op + at, new[key], np + at, live)
        # Which names a changed set of patterns matches cannot be decided. A new pattern only constrains new
        # data further, and a dropped one only frees old data, as long as the other side is open.
        old_open, new_open = _additional(o, op)[0] is None, _additional(n, np)[0] is None
        for key in (k for k in new if k not in old):
            for direction in (BACKWARD,) if old_open else (BACKWARD, FORWARD):
                detail = f"patternProperties {key!r} added"
                path = f"{np}/patternProperties/{_escape(key)}"
                self._emit(live, direction, path, "undecidable", detail, undecidable=True)
        for key in (k for k in old if k not in new):
            for direction in (FORWARD,) if new_open else (BACKWARD, FORWARD):
                detail = f"patternProperties {key!r} removed"
                path = f"{np}/patternProperties/{_escape(key)}"
                self._emit(live, direction, path, "undecidable", detail, undecidable=True)

    def _required(self, o: dict[str, Any], n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        old, new = _required(o), _required(n)
        for name in (n for n in new if n not in old):
            detail, path = f"property {name!r} became required", f"{np}/properties/{_escape(name)}"
            self._emit(live, BACKWARD, path, "required-added", detail, f"lack property {name!r}")
        for name in (n for n in old if n not in new):
            detail, path = f"property {name!r} is no longer required", f"{np}/properties/{_escape(name)}"
            self._emit(live, FORWARD, path, "required-removed", detail, f"lack property {name!r}")

    def _dependencies(self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        old, new = _dependent_required(o), _dependent_required(n)
        old_required, new_required = set(_required(o)), set(_required(n))
        keyword = "dependentRequired" if "dependentRequired" in n or "dependentRequired" in o else "dependencies"
        for name in new:
            if added := sorted(new[name] - old.get(name, set()) - old_required):
                detail, hint = f"{name!r} now also requires {_show_all(added)}", f"carry {name!r} without {added[0]!r}"
                self._emit(live, BACKWARD, f"{np}/{keyword}/{_escape(name)}", "dependency-added", detail, hint)
        for name in old:
            if removed := sorted(old[name] - new.get(name, set()) - new_required):
                detail = f"{name!r} no longer requires {_show_all(removed)}"
                hint = f"carry {name!r} without {removed[0]!r}"
                self._emit(live, FORWARD, f"{np}/{keyword}/{_escape(name)}", "dependency-removed", detail, hint)
        old_schemas, new_schemas = _dependent_schemas(o, op), _dependent_schemas(n, np)
        for name in [*old_schemas, *(k for k in new_schemas if k not in old_schemas)]:
            missing = f"/dependentSchemas/{_escape(name)}"
            old_schema = old_schemas.get(name, (True, op + missing))
            new_schema = new_schemas.get(name, (True, np + missing))
            self.compare(*old_schema, *new_schema, live)

    # composition

    def _composition(self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        self._all_of(o, op, n, np, live)
        self._any_of(o, op, n, np, live)
        self._one_of(o, op, n, np, live)
        self._not(o, op, n, np, live)
        self._if_then_else(o, op, n, np, live)
        for keyword in ("$dynamicRef", "$recursiveRef"):
            if keyword in o or keyword in n:
                self._undecidable(live, f"{np}/{keyword}", f"{keyword} changed")

    def _unmatched(
        self, old: list[tuple[Any, str]], new: list[tuple[Any, str]]
    ) -> tuple[list[tuple[Any, str]], list[tuple[Any, str]]]:
        """The branches left on each side after pairing off structurally identical ones."""
        left_old, left_new = list(old), []
        for branch in new:
            match = next((i for i, b in enumerate(left_old) if self.same(*b, *branch)), None)
            if match is None:
                left_new.append(branch)
            else:
                del left_old[match]
        return left_old, left_new

    def _all_of(self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        left_old, left_new = self._unmatched(_branches(o, op, "allOf") or [], _branches(n, np, "allOf") or [])
        if left_old and len(left_old) == len(left_new):  # branches edited in place: each must fit its own
            for old, new in zip(left_old, left_new, strict=True):
                self.compare(*old, *new, live)
            return
        # A branch identical to the whole other side is implied by it (wrapping a schema in allOf).
        if any(not self.same(o, op, *branch) for branch in left_new):
            self._emit(live, BACKWARD, f"{np}/allOf", "undecidable", "allOf gained branches", undecidable=True)
        if any(not self.same(*branch, n, np) for branch in left_old):
            self._emit(live, FORWARD, f"{np}/allOf", "undecidable", "allOf lost branches", undecidable=True)

    def _any_of(self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        """Fits when every branch of the narrow side, or the narrow side as a whole, is identical to some
        branch of the wide side (so wrapping a schema as `anyOf: [schema, {"type": "null"}]` is fine)."""
        old, new = _branches(o, op, "anyOf"), _branches(n, np, "anyOf")
        for direction, narrow, wide, whole in ((BACKWARD, old, new, (o, op)), (FORWARD, new, old, (n, np))):
            if wide is None or any(_is_open(schema) for schema, _ in wide):
                continue
            if any(self._identical(whole, w, direction) for w in wide):
                continue
            if narrow is not None and all(any(self._identical(b, w, direction) for w in wide) for b in narrow):
                continue
            self._emit(live, direction, f"{np}/anyOf", "undecidable", "anyOf changed", undecidable=True)

    def _identical(self, narrow: tuple[Any, str], wide: tuple[Any, str], direction: str) -> bool:
        return self.same(*narrow, *wide) if direction == BACKWARD else self.same(*wide, *narrow)

    def _one_of(self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        """oneOf is not monotonic (a new branch may overlap an old one): fits only with the same branches."""
        old, new = _branches(o, op, "oneOf"), _branches(n, np, "oneOf")
        if old is not None and new is not None and self._unmatched(old, new) == ([], []):
            return
        for direction, wide in ((BACKWARD, new), (FORWARD, old)):
            if wide is not None:
                self._emit(live, direction, f"{np}/oneOf", "undecidable", "oneOf changed", undecidable=True)

    def _not(self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        if "not" in o and "not" in n and self.same(o["not"], f"{op}/not", n["not"], f"{np}/not"):
            return
        for direction, wide in ((BACKWARD, n), (FORWARD, o)):
            if "not" in wide:
                self._emit(live, direction, f"{np}/not", "undecidable", "not changed", undecidable=True)

    def _if_then_else(self, o: dict[str, Any], op: str, n: dict[str, Any], np: str, live: frozenset[str]) -> None:
        old, new = _conditional(o), _conditional(n)
        if old and new and self.same(o["if"], f"{op}/if", n["if"], f"{np}/if"):
            for keyword in ("then", "else"):  # same condition: each branch must fit its counterpart
                self.compare(o.get(keyword, True), f"{op}/{keyword}", n.get(keyword, True), f"{np}/{keyword}", live)
            return
        if new:
            self._emit(live, BACKWARD, f"{np}/if", "undecidable", "if/then/else changed", undecidable=True)
        if old:
            self._emit(live, FORWARD, f"{np}/if", "undecidable", "if/then/else changed", undecidable=True)
