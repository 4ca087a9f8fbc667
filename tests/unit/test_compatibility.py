"""The schema compatibility rules (events_api/compatibility.py), as a table of (old, new, mode) -> findings,
plus properties checked against a real validator: the strict comparison never calls a pair compatible
when an instance of the old schema fails the new one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events_api.compatibility import (
    MODES,
    Finding,
    check_compatibility,
    fits_into,
    strictly_fits_into,
)

DRAFT4 = "http://json-schema.org/draft-04/schema#"
DRAFT7 = "http://json-schema.org/draft-07/schema#"
B, F = "BACKWARD", "FORWARD"


def obj(required: list[str] | None = None, **properties: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "additionalProperties": False}


def found(findings: list[Finding]) -> set[str]:
    return {f"{f.direction} {f.rule} {f.path}" for f in findings}


STR, INT, NUM = {"type": "string"}, {"type": "integer"}, {"type": "number"}
MONEY_DEFS = {"$defs": {"money": NUM}}


def tree(value: dict[str, Any]) -> dict[str, Any]:
    children = {"type": "array", "items": {"$ref": "#/$defs/node"}}
    return {"$defs": {"node": obj(value=value, children=children)}, "$ref": "#/$defs/node"}


def self_ref(n: dict[str, Any]) -> dict[str, Any]:
    return obj(n=n, child={"$ref": "#"})


BASE = {"$ref": "#/$defs/base"}

TABLE = [
    # objects: properties, required, additionalProperties
    pytest.param(obj(a=STR), obj(a=STR, b=INT), "FULL", set(), id="optional-property-added-open-lenient"),
    pytest.param(obj(a=STR, b=INT), obj(a=STR), "FULL", set(), id="optional-property-removed-open-lenient"),
    pytest.param(
        obj(a=STR),
        obj(["email"], a=STR, email=STR),
        "FULL",
        {"BACKWARD required-added /properties/email"},
        id="required-property-added",
    ),
    pytest.param(
        obj(a=STR, email=STR),
        obj(["email"], a=STR, email=STR),
        "FULL",
        {"BACKWARD required-added /properties/email"},
        id="optional-becomes-required",
    ),
    pytest.param(
        obj(["email"], email=STR),
        obj(email=STR),
        "FULL",
        {"FORWARD required-removed /properties/email"},
        id="required-becomes-optional",
    ),
    pytest.param(
        obj(["email"], email=STR),
        obj(),
        "FULL",
        {"FORWARD required-removed /properties/email"},
        id="required-property-removed",
    ),
    pytest.param(
        closed(obj(a=STR)),
        closed(obj(a=STR, note=STR)),
        "FULL",
        {"FORWARD property-added /properties/note"},
        id="optional-added-to-closed",
    ),
    pytest.param(
        closed(obj(a=STR, note=STR)),
        closed(obj(a=STR)),
        "FULL",
        {"BACKWARD property-removed /properties/note"},
        id="optional-removed-from-closed",
    ),
    pytest.param(
        obj(a=STR),
        closed(obj(a=STR)),
        "FULL",
        {"BACKWARD additional-properties-closed /additionalProperties"},
        id="additional-properties-closed",
    ),
    pytest.param(
        closed(obj(a=STR)),
        {**obj(a=STR), "additionalProperties": True},
        "FULL",
        {"FORWARD additional-properties-opened /additionalProperties"},
        id="additional-properties-opened",
    ),
    pytest.param(
        {**obj(a=STR), "propertyNames": {"enum": ["a"]}},
        {**closed(obj(a=STR)), "propertyNames": {"enum": ["a"]}},
        "FULL",
        set(),
        id="closing-rejects-nothing-old-allowed",
    ),
    pytest.param(
        {"additionalProperties": NUM},
        {"additionalProperties": INT},
        "FULL",
        {"BACKWARD type-narrowed /additionalProperties/type"},
        id="additional-properties-schema-recursed",
    ),
    pytest.param(
        {**obj(a=STR), "additionalProperties": STR},
        {**obj(), "additionalProperties": INT},
        "FULL",
        {"BACKWARD type-narrowed /additionalProperties/type", "FORWARD type-widened /additionalProperties/type"},
        id="property-removed-into-additional-schema",
    ),
    pytest.param(
        {"additionalProperties": {}}, {"additionalProperties": True}, "FULL", set(), id="additional-empty-is-true"
    ),
    pytest.param(
        obj(),
        {**obj(), "minProperties": 1},
        "FULL",
        {"BACKWARD minProperties-tightened /minProperties"},
        id="min-properties-added",
    ),
    pytest.param(
        {**obj(), "maxProperties": 3},
        obj(),
        "FULL",
        {"FORWARD maxProperties-loosened /maxProperties"},
        id="max-properties-removed",
    ),
    pytest.param(
        obj(),
        {**obj(), "dependentRequired": {"card": ["cvv"]}},
        "FULL",
        {"BACKWARD dependency-added /dependentRequired/card"},
        id="dependent-required-added",
    ),
    pytest.param(
        {"$schema": DRAFT7, "dependencies": {"card": ["cvv"]}},
        {"$schema": DRAFT7},
        "FULL",
        {"FORWARD dependency-removed /dependencies/card"},
        id="draft7-dependencies-removed",
    ),
    pytest.param(
        {"dependentSchemas": {"card": {"required": ["billing"]}}},
        {"dependentSchemas": {"card": {"required": ["billing", "cvv"]}}},
        "FULL",
        {"BACKWARD required-added /dependentSchemas/card/properties/cvv"},
        id="dependent-schemas-recursed",
    ),
    pytest.param(
        obj(meta={"type": "object", "properties": {"x": NUM}}),
        obj(meta={"type": "object", "properties": {"x": INT}}),
        "FULL",
        {"BACKWARD type-narrowed /properties/meta/properties/x/type"},
        id="nested-object",
    ),
    pytest.param(
        {"propertyNames": {"maxLength": 10}},
        {"propertyNames": {"maxLength": 5}},
        "FULL",
        {"BACKWARD maxLength-tightened /propertyNames/maxLength"},
        id="property-names-recursed",
    ),
    # types
    pytest.param(
        obj(amount=NUM),
        obj(amount=INT),
        "FULL",
        {"BACKWARD type-narrowed /properties/amount/type"},
        id="number-to-integer-narrows",
    ),
    pytest.param(
        obj(amount=INT),
        obj(amount=NUM),
        "FULL",
        {"FORWARD type-widened /properties/amount/type"},
        id="integer-to-number-widens",
    ),
    pytest.param(
        {"type": ["string", "null"]}, STR, "FULL", {"BACKWARD type-narrowed /type"}, id="type-removed-from-list"
    ),
    pytest.param(STR, {"type": ["null", "string"]}, "FULL", {"FORWARD type-widened /type"}, id="type-added-to-list"),
    pytest.param({"type": ["string", "null"]}, {"type": ["null", "string"]}, "FULL", set(), id="type-list-is-a-set"),
    pytest.param(STR, INT, "FULL", {"BACKWARD type-narrowed /type", "FORWARD type-widened /type"}, id="type-changed"),
    pytest.param({}, STR, "FULL", {"BACKWARD type-narrowed /type"}, id="type-added"),
    pytest.param(
        INT, {"type": ["integer", "number"]}, "FULL", {"FORWARD type-widened /type"}, id="number-beside-integer"
    ),
    # enum and const
    pytest.param(
        {"enum": ["a", "b", "c"]},
        {"enum": ["a", "b"]},
        "FULL",
        {"BACKWARD enum-narrowed /enum"},
        id="enum-value-removed",
    ),
    pytest.param(
        {"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}, "FULL", {"FORWARD enum-widened /enum"}, id="enum-value-added"
    ),
    pytest.param(STR, {"type": "string", "enum": ["a"]}, "FULL", {"BACKWARD enum-added /enum"}, id="enum-added"),
    pytest.param({"type": "string", "enum": ["a"]}, STR, "FULL", {"FORWARD enum-removed /enum"}, id="enum-removed"),
    pytest.param(
        {"const": "a"},
        {"const": "b"},
        "FULL",
        {"BACKWARD enum-narrowed /const", "FORWARD enum-widened /const"},
        id="const-changed",
    ),
    pytest.param({"const": "a"}, {"enum": ["a", "b"]}, "FULL", {"FORWARD enum-widened /enum"}, id="const-to-enum"),
    pytest.param({"enum": ["b", "a"]}, {"enum": ["a", "b"]}, "FULL", set(), id="enum-reordered"),
    pytest.param({"enum": [1, 2]}, {"enum": [2.0, 1]}, "FULL", set(), id="enum-json-number-equality"),
    pytest.param({"enum": [1, True]}, {"enum": [1]}, "FULL", {"BACKWARD enum-narrowed /enum"}, id="enum-true-is-not-1"),
    pytest.param(
        {"type": "string", "enum": ["a", 1]},
        {"type": "string", "enum": ["a"]},
        "FULL",
        set(),
        id="enum-values-outside-type-ignored",
    ),
    # numbers
    pytest.param({"minimum": 0}, {"minimum": 1}, "FULL", {"BACKWARD minimum-tightened /minimum"}, id="minimum-raised"),
    pytest.param({"minimum": 1}, {"minimum": 0}, "FULL", {"FORWARD minimum-loosened /minimum"}, id="minimum-lowered"),
    pytest.param(NUM, {**NUM, "maximum": 100}, "FULL", {"BACKWARD maximum-tightened /maximum"}, id="maximum-added"),
    pytest.param({**NUM, "maximum": 100}, NUM, "FULL", {"FORWARD maximum-loosened /maximum"}, id="maximum-removed"),
    pytest.param(
        {"maximum": 10}, {"maximum": 5}, "FULL", {"BACKWARD maximum-tightened /maximum"}, id="maximum-lowered"
    ),
    pytest.param(
        {"exclusiveMaximum": 5},
        {"exclusiveMaximum": 10},
        "FULL",
        {"FORWARD exclusiveMaximum-loosened /exclusiveMaximum"},
        id="exclusive-maximum-raised",
    ),
    pytest.param(
        {"exclusiveMinimum": 0},
        {"minimum": 0},
        "FULL",
        {"FORWARD minimum-loosened /minimum"},
        id="exclusive-to-inclusive",
    ),
    pytest.param(
        {"minimum": 1},
        {"exclusiveMinimum": 0},
        "FULL",
        {"FORWARD exclusiveMinimum-loosened /exclusiveMinimum"},
        id="minimum-1-to-exclusive-0",
    ),
    pytest.param(
        {"maximum": 5},
        {"exclusiveMaximum": 5},
        "FULL",
        {"BACKWARD exclusiveMaximum-tightened /exclusiveMaximum"},
        id="exclusive-maximum",
    ),
    pytest.param(
        {"$schema": DRAFT4, "minimum": 0},
        {"$schema": DRAFT4, "minimum": 0, "exclusiveMinimum": True},
        "FULL",
        {"BACKWARD exclusiveMinimum-tightened /exclusiveMinimum"},
        id="draft4-exclusive-minimum-added",
    ),
    pytest.param(
        {"$schema": DRAFT4, "maximum": 9, "exclusiveMaximum": True},
        {"$schema": DRAFT4, "maximum": 9},
        "FULL",
        {"FORWARD maximum-loosened /maximum"},
        id="draft4-exclusive-maximum-removed",
    ),
    pytest.param(
        {"$schema": DRAFT4, "minimum": 0, "exclusiveMinimum": True},
        {"minimum": 1},
        "FULL",
        {"BACKWARD minimum-tightened /minimum"},
        id="draft4-exclusive-0-to-minimum-1",
    ),
    pytest.param(
        {"multipleOf": 2},
        {"multipleOf": 4},
        "FULL",
        {"BACKWARD multipleOf-tightened /multipleOf"},
        id="multiple-of-tightened",
    ),
    pytest.param(
        {"multipleOf": 2},
        {"multipleOf": 3},
        "FULL",
        {"BACKWARD multipleOf-changed /multipleOf", "FORWARD multipleOf-changed /multipleOf"},
        id="multiple-of-changed",
    ),
    pytest.param(
        {"multipleOf": 0.1},
        {"multipleOf": 0.05},
        "FULL",
        {"FORWARD multipleOf-loosened /multipleOf"},
        id="multiple-of-decimal",
    ),
    pytest.param({"multipleOf": 5}, {}, "FULL", {"FORWARD multipleOf-loosened /multipleOf"}, id="multiple-of-removed"),
    # strings
    pytest.param(
        STR, {**STR, "minLength": 1}, "FULL", {"BACKWARD minLength-tightened /minLength"}, id="min-length-added"
    ),
    pytest.param(
        {**STR, "maxLength": 10},
        {**STR, "maxLength": 20},
        "FULL",
        {"FORWARD maxLength-loosened /maxLength"},
        id="max-length-raised",
    ),
    pytest.param(STR, {**STR, "pattern": "^[a-z]+$"}, "FULL", {"BACKWARD pattern-added /pattern"}, id="pattern-added"),
    pytest.param(
        {**STR, "pattern": "^[a-z]+$"}, STR, "FULL", {"FORWARD pattern-removed /pattern"}, id="pattern-removed"
    ),
    pytest.param(
        {**STR, "pattern": "^[a-z]+$"},
        {**STR, "pattern": "^[a-z0-9]+$"},
        "FULL",
        {"BACKWARD pattern-changed /pattern", "FORWARD pattern-changed /pattern"},
        id="pattern-changed-is-never-compatible",
    ),
    pytest.param(STR, {**STR, "format": "email"}, "FULL", {"BACKWARD format-added /format"}, id="format-added"),
    pytest.param({**STR, "format": "email"}, STR, "FULL", {"FORWARD format-removed /format"}, id="format-removed"),
    pytest.param(
        {**STR, "format": "date"},
        {**STR, "format": "date-time"},
        "FULL",
        {"BACKWARD format-changed /format", "FORWARD format-changed /format"},
        id="format-changed",
    ),
    pytest.param(
        INT, {**INT, "format": "int64", "minLength": 3}, "FULL", set(), id="string-keywords-ignored-for-integers"
    ),
    # arrays
    pytest.param(
        obj(tags={"type": "array", "items": NUM}),
        obj(tags={"type": "array", "items": INT}),
        "FULL",
        {"BACKWARD type-narrowed /properties/tags/items/type"},
        id="items-narrowed",
    ),
    pytest.param(
        obj(items={"type": "array", "items": obj(sku=STR)}),
        obj(items={"type": "array", "items": obj(["sku"], sku=STR)}),
        "FULL",
        {"BACKWARD required-added /properties/items/items/properties/sku"},
        id="array-of-objects",
    ),
    pytest.param(
        {"type": "array"},
        {"type": "array", "minItems": 1},
        "FULL",
        {"BACKWARD minItems-tightened /minItems"},
        id="min-items-added",
    ),
    pytest.param(
        {"type": "array", "maxItems": 2},
        {"type": "array", "maxItems": 3},
        "FULL",
        {"FORWARD maxItems-loosened /maxItems"},
        id="max-items-raised",
    ),
    pytest.param(
        {"type": "array"},
        {"type": "array", "uniqueItems": True},
        "FULL",
        {"BACKWARD uniqueItems-tightened /uniqueItems"},
        id="unique-items-turned-on",
    ),
    pytest.param(
        {"prefixItems": [STR, NUM]},
        {"prefixItems": [STR, INT]},
        "FULL",
        {"BACKWARD type-narrowed /prefixItems/1/type"},
        id="prefix-items-2020-12",
    ),
    pytest.param(
        {"prefixItems": [STR]},
        {"prefixItems": [STR, INT]},
        "FULL",
        {"BACKWARD type-narrowed /prefixItems/1/type"},
        id="tuple-extended-over-open-rest",
    ),
    pytest.param(
        {"prefixItems": [STR], "items": False},
        {"prefixItems": [STR], "items": INT},
        "FULL",
        {"FORWARD false-schema-removed /items"},
        id="closed-tuple-opened",
    ),
    pytest.param(
        {"$schema": DRAFT7, "items": [STR], "additionalItems": False},
        {"$schema": DRAFT7, "items": [STR]},
        "FULL",
        {"FORWARD false-schema-removed /additionalItems"},
        id="draft7-tuple-items",
    ),
    pytest.param(
        {"$schema": DRAFT7, "items": [STR, NUM]},
        {"$schema": DRAFT7, "items": [STR, INT]},
        "FULL",
        {"BACKWARD type-narrowed /items/1/type"},
        id="draft7-tuple-item-narrowed",
    ),
    pytest.param(
        {"contains": STR},
        {"contains": INT},
        "FULL",
        {"BACKWARD undecidable /contains", "FORWARD undecidable /contains"},
        id="contains-changed",
    ),
    # $ref
    pytest.param(
        {**MONEY_DEFS, **obj(price={"$ref": "#/$defs/money"})},
        {"$defs": {"money": INT}, **obj(price={"$ref": "#/$defs/money"})},
        "FULL",
        {"BACKWARD type-narrowed /$defs/money/type"},
        id="ref-into-defs",
    ),
    pytest.param(
        {"$schema": DRAFT7, "definitions": {"m": NUM}, **obj(p={"$ref": "#/definitions/m"})},
        {"$schema": DRAFT7, "definitions": {"m": INT}, **obj(p={"$ref": "#/definitions/m"})},
        "FULL",
        {"BACKWARD type-narrowed /definitions/m/type"},
        id="draft7-ref-into-definitions",
    ),
    pytest.param(
        {**MONEY_DEFS, **obj(a={"$ref": "#/$defs/money"}, b={"$ref": "#/$defs/money"})},
        {"$defs": {"money": INT}, **obj(a={"$ref": "#/$defs/money"}, b={"$ref": "#/$defs/money"})},
        "FULL",
        {"BACKWARD type-narrowed /$defs/money/type"},
        id="shared-def-reported-once",
    ),
    pytest.param(
        obj(price=NUM),
        {**MONEY_DEFS, **obj(price={"$ref": "#/$defs/money", "description": "EUR"})},
        "FULL",
        set(),
        id="inline-to-ref-equivalent",
    ),
    pytest.param(obj(a=STR, b=STR), obj(a=STR, b={"$ref": "#/properties/a"}), "FULL", set(), id="ref-to-json-pointer"),
    pytest.param(tree(NUM), tree(NUM), "FULL", set(), id="recursive-ref-identical"),
    pytest.param(
        tree(NUM),
        tree(INT),
        "FULL",
        {"BACKWARD type-narrowed /$defs/node/properties/value/type"},
        id="recursive-ref-changed",
    ),
    pytest.param(
        self_ref(NUM), self_ref(INT), "FULL", {"BACKWARD type-narrowed /properties/n/type"}, id="recursive-root-ref"
    ),
    pytest.param(
        {**MONEY_DEFS, "$ref": "#/$defs/money", "minimum": 0},
        {**MONEY_DEFS, "$ref": "#/$defs/money", "minimum": 1},
        "FULL",
        {"BACKWARD minimum-tightened /minimum"},
        id="ref-beside-keywords-both-sides",
    ),
    pytest.param(
        NUM,
        {**MONEY_DEFS, "$ref": "#/$defs/money", "minimum": 0},
        "FULL",
        {"BACKWARD undecidable /$ref", "FORWARD undecidable /$ref"},
        id="ref-beside-keywords-one-side",
    ),
    pytest.param(
        {"$ref": "https://example.com/a.json"},
        {"$ref": "https://example.com/b.json"},
        "FULL",
        {"BACKWARD undecidable /$ref", "FORWARD undecidable /$ref"},
        id="remote-ref-changed",
    ),
    pytest.param(
        {"$ref": "https://example.com/a.json"},
        {"$ref": "https://example.com/a.json", "title": "A"},
        "FULL",
        set(),
        id="remote-ref-identical",
    ),
    pytest.param({"$ref": "#/$defs/gone"}, {"$ref": "#/$defs/gone"}, "FULL", set(), id="broken-ref-identical"),
    pytest.param(
        {"$ref": "#/$defs/gone"},
        {"$ref": "#/$defs/gone", "title": "x"},
        "FULL",
        {"BACKWARD undecidable /$ref", "FORWARD undecidable /$ref"},
        id="broken-ref-not-provably-identical",
    ),
    # composition
    pytest.param(
        {"anyOf": [STR, {"type": "null"}]},
        {"anyOf": [STR, {"type": "null"}, INT]},
        "FULL",
        {"FORWARD undecidable /anyOf"},
        id="any-of-branch-added",
    ),
    pytest.param(
        {"anyOf": [STR, {"type": "null"}]},
        {"anyOf": [STR]},
        "FULL",
        {"BACKWARD undecidable /anyOf"},
        id="any-of-branch-removed",
    ),
    pytest.param(
        {"anyOf": [STR, NUM]},
        {"anyOf": [STR, INT]},
        "FULL",
        {"BACKWARD undecidable /anyOf", "FORWARD undecidable /anyOf"},
        id="any-of-branch-changed",
    ),
    pytest.param(
        {"anyOf": [STR, NUM]},
        {"anyOf": [{**NUM, "title": "n"}, STR], "description": "x"},
        "FULL",
        set(),
        id="any-of-reordered-and-documented",
    ),
    pytest.param(
        STR,
        {"anyOf": [STR, {"type": "null"}]},
        "FULL",
        {"FORWARD type-widened /type"},
        id="any-of-wrapping-a-scalar",
    ),
    pytest.param(
        obj(["a"], a=STR),
        {"anyOf": [obj(["a"], a=STR), {"type": "null"}]},
        "FULL",
        {"FORWARD type-widened /type", "FORWARD required-removed /properties/a"},
        id="nullable-by-wrapping-in-any-of",
    ),
    pytest.param(obj(["a"], a=STR), {"allOf": [obj(["a"], a=STR)]}, "BACKWARD", set(), id="wrapped-in-all-of"),
    pytest.param(
        STR,
        {"type": "string", "anyOf": [{"maxLength": 3}, {"pattern": "^a"}]},
        "FULL",
        {"BACKWARD undecidable /anyOf"},
        id="any-of-added",
    ),
    pytest.param(
        {"oneOf": [STR, INT]},
        {"oneOf": [STR, INT, {"type": "null"}]},
        "FULL",
        {"BACKWARD undecidable /oneOf", "FORWARD undecidable /oneOf"},
        id="one-of-branch-added",
    ),
    pytest.param(
        {"oneOf": [STR, INT], "minLength": 1},
        {"oneOf": [INT, STR], "minLength": 2},
        "FULL",
        {"BACKWARD minLength-tightened /minLength"},
        id="one-of-same-branches",
    ),
    pytest.param(
        {"allOf": [BASE, obj(x=NUM)], "$defs": {"base": obj(id=STR)}},
        {"allOf": [BASE, obj(x=INT)], "$defs": {"base": obj(id=STR)}},
        "FULL",
        {"BACKWARD type-narrowed /allOf/1/properties/x/type"},
        id="all-of-branch-edited",
    ),
    pytest.param(
        {"allOf": [BASE], "$defs": {"base": obj(id=STR)}},
        {"allOf": [BASE], "$defs": {"base": obj(["id"], id=STR)}},
        "FULL",
        {"BACKWARD required-added /$defs/base/properties/id"},
        id="all-of-ref-target-changed",
    ),
    pytest.param(
        {"allOf": [obj(a=STR)]},
        {"allOf": [obj(a=STR), obj(["b"])]},
        "FULL",
        {"BACKWARD undecidable /allOf"},
        id="all-of-branch-added",
    ),
    pytest.param(
        {"not": STR}, {"not": INT}, "FULL", {"BACKWARD undecidable /not", "FORWARD undecidable /not"}, id="not-changed"
    ),
    pytest.param(
        {"if": obj(["card"]), "then": obj(["cvv"])},
        {"if": obj(["card"]), "then": obj(["cvv", "zip"])},
        "FULL",
        {"BACKWARD required-added /then/properties/zip"},
        id="if-then-same-condition",
    ),
    pytest.param(
        {"if": obj(["card"]), "then": obj(["cvv"])},
        {"if": obj(["iban"]), "then": obj(["cvv"])},
        "FULL",
        {"BACKWARD undecidable /if", "FORWARD undecidable /if"},
        id="if-changed",
    ),
    pytest.param(
        {"patternProperties": {"^x-": STR}},
        {"patternProperties": {"^ext-": STR}},
        "FULL",
        {"BACKWARD undecidable /patternProperties/^ext-", "FORWARD undecidable /patternProperties/^x-"},
        id="pattern-properties-keys-changed",
    ),
    pytest.param(
        {"patternProperties": {"^x-": NUM}},
        {"patternProperties": {"^x-": INT}},
        "FULL",
        {"BACKWARD type-narrowed /patternProperties/^x-/type"},
        id="pattern-properties-same-key",
    ),
    pytest.param(
        obj(a=STR),
        {**obj(a=STR), "unevaluatedProperties": False},
        "FULL",
        {"BACKWARD additional-properties-closed /unevaluatedProperties"},
        id="unevaluated-properties-like-additional",
    ),
    pytest.param(
        {"allOf": [obj(a=STR)]},
        {"allOf": [obj(a=STR)], "unevaluatedProperties": False},
        "FULL",
        {"BACKWARD undecidable /unevaluatedProperties"},
        id="unevaluated-properties-beside-all-of",
    ),
    pytest.param(
        {"dependentSchemas": {"a": obj(["b"])}, "unevaluatedProperties": False},
        {"dependentSchemas": {"a": obj(["b"])}, "unevaluatedProperties": False, "title": "t"},
        "FULL",
        set(),
        id="unevaluated-identical",
    ),
    pytest.param(
        {"$dynamicRef": "#meta"},
        {"$dynamicRef": "#other"},
        "FULL",
        {"BACKWARD undecidable /$dynamicRef", "FORWARD undecidable /$dynamicRef"},
        id="dynamic-ref",
    ),
    # boolean schemas
    pytest.param(True, False, "FULL", {"BACKWARD false-schema-added "}, id="true-to-false"),
    pytest.param(False, True, "FULL", {"FORWARD false-schema-removed "}, id="false-to-true"),
    pytest.param(
        obj(x=False), obj(x={}), "FULL", {"FORWARD false-schema-removed /properties/x"}, id="property-false-to-anything"
    ),
    pytest.param(True, {}, "FULL", set(), id="true-is-empty-schema"),
    pytest.param({"not": {}}, False, "FULL", set(), id="not-anything-is-false"),
    pytest.param(False, STR, "BACKWARD", set(), id="false-fits-into-anything"),
    # gating by type, documentation, modes
    pytest.param(
        STR,
        {**STR, "required": ["x"], "minimum": 3, "items": INT},
        "FULL",
        set(),
        id="keywords-for-other-types-ignored",
    ),
    pytest.param(
        {"enum": ["a", "b"]}, {"enum": ["a", "b"], "minimum": 5}, "FULL", set(), id="enum-of-strings-ignores-minimum"
    ),
    pytest.param(
        obj(a=STR),
        {**obj(a={**STR, "description": "the a"}), "title": "T", "examples": [{"a": "x"}]},
        "FULL",
        set(),
        id="documentation-only",
    ),
    pytest.param(obj(a=INT), obj(a=NUM), "BACKWARD", set(), id="backward-ignores-widening"),
    pytest.param(obj(a=NUM), obj(a=INT), "FORWARD", set(), id="forward-ignores-narrowing"),
    pytest.param(
        obj(a=NUM),
        obj(a=INT),
        "BACKWARD_TRANSITIVE",
        {"BACKWARD type-narrowed /properties/a/type"},
        id="backward-transitive-single",
    ),
    pytest.param(obj(a=NUM), obj(["b"], a=STR), "NONE", set(), id="none-checks-nothing"),
    pytest.param(
        obj(a=NUM),
        obj(a=STR),
        "FULL_TRANSITIVE",
        {"BACKWARD type-narrowed /properties/a/type", "FORWARD type-widened /properties/a/type"},
        id="full-transitive-single",
    ),
]


@pytest.mark.parametrize(("old", "new", "mode", "expected"), TABLE)
def test_rule(old: Any, new: Any, mode: str, expected: set[str]) -> None:
    findings = check_compatibility(mode, new, [(7, old)])
    assert found(findings) == expected
    for finding in findings:
        assert finding.against_version == 7
        assert finding.message.startswith(f"{finding.path or '(root)'}: ")
        assert finding.rule in finding.message
        assert finding.undecidable == (finding.rule in {"undecidable", "pattern-changed"})


def test_messages_say_where_what_and_why() -> None:
    old, new = obj(amount=NUM), obj(amount=INT)
    [backward] = check_compatibility("FULL", new, [(3, old)])
    assert backward.message == (
        "/properties/amount/type: type narrowed from number to integer "
        "(type-narrowed; breaks BACKWARD: data written with version 3 may hold 1.5)"
    )
    [forward] = check_compatibility("FULL", old, [(4, new)])
    assert forward.message == (
        "/properties/amount/type: type widened from integer to number "
        "(type-widened; breaks FORWARD: new data may hold 1.5, which version 4 rejects)"
    )
    [undecidable, _] = check_compatibility("FULL", {"not": INT}, [(2, {"not": STR})])
    assert undecidable.undecidable
    assert "treated as breaking BACKWARD against version 2" in undecidable.message


def test_transitive_modes_check_every_version() -> None:
    """The lenient policy is not transitive: dropping then re-adding an optional property with another type
    passes each step but not the whole chain."""
    v1, v2, v3 = obj(a=STR, code=STR), obj(code=STR), obj(a=INT, code=STR)
    assert check_compatibility("BACKWARD", v2, [(1, v1)]) == []
    assert check_compatibility("BACKWARD", v3, [(1, v1), (2, v2)]) == []
    [finding] = check_compatibility("BACKWARD_TRANSITIVE", v3, [(1, v1), (2, v2)])
    assert (finding.rule, finding.path, finding.against_version) == ("type-narrowed", "/properties/a/type", 1)
    assert "version 1" in finding.message
    full = check_compatibility("FULL_TRANSITIVE", v3, [(1, v1), (2, v2)])
    assert [(f.direction, f.against_version) for f in full] == [(B, 1), (F, 1)]
    assert check_compatibility("FORWARD_TRANSITIVE", v3, [(1, v1), (2, v2)])[0].direction == F


def test_non_transitive_modes_check_the_latest_only() -> None:
    v1, v2, v3 = obj(a=NUM), obj(a=INT), obj(a=INT, b=STR)
    assert check_compatibility("BACKWARD", v3, [(1, v1), (2, v2)]) == []
    assert [f.against_version for f in check_compatibility("BACKWARD_TRANSITIVE", v3, [(1, v1), (2, v2)])] == [1]


def test_modes_and_edge_cases() -> None:
    assert MODES == (
        "NONE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"
    )  # fmt: skip
    with pytest.raises(ValueError, match="unknown compatibility mode"):
        check_compatibility("SIDEWAYS", {}, [(1, {})])
    for mode in MODES:
        assert check_compatibility(mode, obj(["b"], a=INT), []) == []


def test_fits_into_is_the_raw_containment_check() -> None:
    assert fits_into(INT, NUM) == []
    [finding] = fits_into(NUM, INT)
    assert (finding.direction, finding.rule, finding.path, finding.against_version) == (
        "",
        "type-narrowed",
        "/type",
        None,
    )
    assert "may hold 1.5" in finding.message
    assert fits_into(obj(a=STR), obj(a=STR, b=INT)) == []  # lenient
    assert [f.rule for f in strictly_fits_into(obj(a=STR), obj(a=STR, b=INT))] == ["type-narrowed"]
    assert [f.path for f in strictly_fits_into(obj(a=STR, b=INT), obj(a=STR))] == []


def test_mutually_recursive_refs_of_different_periods_terminate() -> None:
    old = {"$defs": {"a": obj(next={"$ref": "#/$defs/a"}, v=NUM)}, "$ref": "#/$defs/a"}
    new = {
        "$defs": {
            "a": obj(next={"$ref": "#/$defs/b"}, v=NUM),
            "b": obj(next={"$ref": "#/$defs/c"}, v=NUM),
            "c": obj(next={"$ref": "#/$defs/a"}, v=INT),
        },
        "$ref": "#/$defs/a",
    }
    assert found(check_compatibility("FULL", new, [(1, old)])) == {"BACKWARD type-narrowed /$defs/c/properties/v/type"}
    assert check_compatibility("FULL", {"$ref": "#"}, [(1, {"$ref": "#"})]) == []
    loop = {"$defs": {"x": {"$ref": "#/$defs/x"}}, "$ref": "#/$defs/x"}
    assert {f.rule for f in check_compatibility("FULL", loop, [(1, STR)])} == {"undecidable"}


# --- properties, checked with a real validator --------------------------------------------------------

NAMES = st.sampled_from(["a", "b"])
LEAVES: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from([True, False, {}, STR, INT, NUM, {"type": "null"}, {"type": ["string", "null"]}]),
    st.lists(st.sampled_from([1, 2, "a", "b", None, 1.5]), min_size=1, max_size=3, unique=True).map(
        lambda values: {"enum": values}
    ),
    st.tuples(st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "multipleOf"]), st.integers(1, 3)).map(
        lambda kv: {kv[0]: kv[1]}
    ),
    st.tuples(st.sampled_from(["minLength", "maxLength"]), st.integers(0, 2)).map(lambda kv: {**STR, kv[0]: kv[1]}),
)
ADDITIONAL = st.sampled_from([None, True, False, INT])
SIDES = st.sampled_from(["both", "both", "both", "old", "new"])


def mostly_same(values: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, Any]]:
    """Pairs that are usually equal, so that one difference at a time decides the outcome."""
    same = values.map(lambda value: (value, value))
    return st.one_of(same, same, same, st.tuples(values, values))


def _object_pair(
    properties: dict[str, tuple[tuple[Any, Any], str]],
    required: tuple[list[str], list[str]],
    additional: tuple[Any, Any],
) -> tuple[Any, Any]:
    sides: list[dict[str, Any]] = [{"type": "object", "properties": {}}, {"type": "object", "properties": {}}]
    for name, (pair, where) in properties.items():
        for i, side in enumerate(sides):
            if where in ("both", ("old", "new")[i]):
                side["properties"][name] = pair[i]
    for i, side in enumerate(sides):
        if required[i]:
            side["required"] = required[i]
        if additional[i] is not None:
            side["additionalProperties"] = additional[i]
    return sides[0], sides[1]


def _both(key: str, pairs: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    return {key: [p[0] for p in pairs]}, {key: [p[1] for p in pairs]}


def _extend(children: st.SearchStrategy[tuple[Any, Any]]) -> st.SearchStrategy[tuple[Any, Any]]:
    names = st.lists(NAMES, unique=True, max_size=2)
    return st.one_of(
        st.builds(
            _object_pair,
            st.dictionaries(NAMES, st.tuples(children, SIDES), max_size=2),
            mostly_same(names),
            mostly_same(ADDITIONAL),
        ),
        children.map(lambda p: ({"type": "array", "items": p[0]}, {"type": "array", "items": p[1]})),
        st.lists(children, min_size=1, max_size=2).map(lambda ps: _both("prefixItems", ps)),
        st.lists(children, min_size=1, max_size=2).map(lambda ps: _both("anyOf", ps)),
        st.lists(children, min_size=1, max_size=2).map(lambda ps: _both("allOf", ps)),
    )


# Single edits, each of which one rule is about; used both ways round.
EDITS = [
    (NUM, INT),
    (STR, {"type": ["string", "null"]}),
    ({}, STR),
    ({"enum": [1, "a"]}, {"enum": [1]}),
    ({"enum": [1, 2]}, INT),
    ({"const": 2}, {"enum": [2, 3]}),
    ({"minimum": 1}, {"minimum": 2}),
    ({"minimum": 1}, {"exclusiveMinimum": 1}),
    ({"maximum": 2}, {"exclusiveMaximum": 2}),
    ({"maximum": 3}, {"maximum": 2}),
    ({"multipleOf": 2}, {"multipleOf": 4}),
    (STR, {**STR, "maxLength": 1}),
    (STR, {**STR, "minLength": 2}),
    ({"type": "array"}, {"type": "array", "maxItems": 1}),
    ({"type": "array"}, {"type": "array", "uniqueItems": True}),
    (True, False),
    (True, {"not": {}}),
]
EDIT_PAIRS = st.sampled_from(EDITS).flatmap(lambda pair: st.sampled_from([pair, pair[::-1]]))
# Pairs of schemas that share a shape and differ here and there, so that many pairs are compatible.
PAIRS = st.recursive(st.one_of(LEAVES.map(lambda s: (s, s)), EDIT_PAIRS), _extend, max_leaves=6)
SCHEMAS = PAIRS.map(lambda pair: pair[0])
SCALARS: list[Any] = [None, True, False, 0, 1, 2, 3, 4, -1, 1.5, 2.5, "", "a", "ab", "abc"]
WRAPS: list[Callable[[Any], Any]] = [
    lambda v: v,
    lambda v: [v],
    lambda v: [[v]],
    lambda v: [{"a": v}],
    lambda v: {"a": v},
    lambda v: {"b": v},
    lambda v: {"z": v},
    lambda v: {"a": [v]},
    lambda v: {"a": {"a": v}},
]
# Small instances of every shape the generated schemas talk about, each tried against every fitting pair.
INSTANCES: list[Any] = [
    *(wrap(value) for wrap in WRAPS for value in [*SCALARS, [], {}]),
    [1, 1],
    [1, "a"],
    ["a", 1],
    ["a", "b", "ab"],
    {"a": 1, "b": "a"},
    {"a": "a", "b": 1},
    {"a": [1, 1]},
    {"a": {"a": 1.5, "z": None}},
]
PROPERTY_SETTINGS = settings(max_examples=500, deadline=None, database=None, derandomize=True)


def _equivalent(schema: Any) -> Any:
    """The same schema spelled differently (no-op keywords, type lists, reordered enums) outside of the
    keywords that are compared only for identity (anyOf, oneOf, not)."""
    if schema is True:
        return {"minItems": 0}
    if not isinstance(schema, dict):
        return schema
    out = {"minLength": 0, "minProperties": 0, **schema, "description": "same"}
    if isinstance(schema.get("type"), str):
        out["type"] = [schema["type"]]
    if "enum" in schema:
        out["enum"] = list(reversed(schema["enum"]))
    if "properties" in schema:
        out["properties"] = {k: _equivalent(v) for k, v in schema["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict | bool):
            out[key] = _equivalent(schema[key])
    for key in ("prefixItems", "allOf"):
        if key in schema:
            out[key] = [_equivalent(s) for s in schema[key]]
    return out


@PROPERTY_SETTINGS
@given(SCHEMAS)
def test_every_schema_fits_into_itself(schema: Any) -> None:
    assert fits_into(schema, schema) == []
    assert strictly_fits_into(schema, _equivalent(schema)) == []
    assert strictly_fits_into(_equivalent(schema), schema) == []
    assert check_compatibility("FULL", _equivalent(schema), [(1, schema)]) == []


@PROPERTY_SETTINGS
@given(PAIRS)
def test_strict_fits_into_never_accepts_a_counterexample(pair: tuple[Any, Any]) -> None:
    narrow, wide = pair
    if strictly_fits_into(narrow, wide):
        return
    narrow_validator, wide_validator = jsonschema_rs.validator_for(narrow), jsonschema_rs.validator_for(wide)
    for instance in INSTANCES:
        assert not narrow_validator.is_valid(instance) or wide_validator.is_valid(instance), instance


@PROPERTY_SETTINGS
@given(PAIRS)
def test_forward_is_backward_the_other_way_round(pair: tuple[Any, Any]) -> None:
    old, new = pair
    assert bool(check_compatibility("FORWARD", new, [(1, old)])) == bool(fits_into(new, old))
    assert bool(check_compatibility("BACKWARD", new, [(1, old)])) == bool(fits_into(old, new))
