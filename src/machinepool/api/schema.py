"""Turn the pydantic models of ``machinepool.api`` into structural OpenAPI v3 CRD schemas.

The apiserver wants a *structural* schema: every node typed, no ``$ref``, no ``anyOf`` for
optional fields. pydantic's own JSON schema is none of that, so this module walks the model
fields itself. Bounds come from pydantic constraints (``min_length`` → ``minLength`` or
``minItems``, ``ge`` → ``minimum``...), Kubernetes extensions from ``OpenAPI`` markers, and
descriptions from field docstrings.
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from machinepool.api.meta import ObjectMeta, OpenAPI

__all__ = ["model_schema", "root_schema"]

Schema = dict[str, Any]

_SCALARS: dict[type, str] = {str: "string", bool: "boolean", int: "integer", float: "number"}


def root_schema(model: type[BaseModel]) -> Schema:
    """Schema of a top-level kind: apiVersion, kind, ``metadata: {type: object}``, spec, status."""
    schema = model_schema(model)
    properties = schema["properties"]
    properties["apiVersion"] = {"type": "string", "description": "Versioned schema of this object."}
    properties["kind"] = {"type": "string", "description": "REST resource this object represents."}
    properties["metadata"] = {"type": "object"}
    schema["required"] = [name for name in schema.get("required", []) if name != "metadata"]
    if not schema["required"]:
        del schema["required"]
    return schema


def model_schema(model: type[BaseModel]) -> Schema:
    """Object schema of a model: a property per field, ``required`` for fields without default."""
    properties: dict[str, Schema] = {}
    required: list[str] = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        properties[key] = _field_schema(info)
        if info.is_required():
            required.append(key)
    schema: Schema = {"type": "object", "properties": properties}
    if model.__doc__:
        schema["description"] = _short(model.__doc__)
    if required:
        schema["required"] = required
    return schema


def _field_schema(info: FieldInfo) -> Schema:
    """Schema of one field: its type, its constraints, then its own description."""
    schema = _type_schema(info.annotation, info.metadata)
    if info.description:
        schema["description"] = _short(info.description)
    return schema


def _type_schema(tp: Any, metadata: Iterable[Any] = ()) -> Schema:
    """Schema for a type annotation plus the constraint objects attached to it."""
    tp, marks = _unwrap(tp, list(metadata))
    schema = _base_schema(tp)
    _apply(schema, marks)
    return schema


def _unwrap(tp: Any, marks: list[Any]) -> tuple[Any, list[Any]]:
    """Strip ``Annotated`` and ``Optional`` layers, collecting their metadata."""
    while True:
        if get_origin(tp) is Annotated:
            base, *extra = get_args(tp)
            marks.extend(_flatten(extra))
            tp = base
        elif _is_union(tp):
            members = [arg for arg in get_args(tp) if arg is not type(None)]
            if len(members) != 1:
                return tp, marks
            tp = members[0]
        else:
            return tp, marks


def _flatten(extra: Iterable[Any]) -> list[Any]:
    """Expand nested FieldInfo objects (``Annotated[str, Field(...)]``) into their constraints."""
    flat: list[Any] = []
    for item in extra:
        if isinstance(item, FieldInfo):
            flat.extend(item.metadata)
        else:
            flat.append(item)
    return flat


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _base_schema(tp: Any) -> Schema:
    """Schema of a bare type (no Optional, no Annotated)."""
    origin = get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, ObjectMeta):
        return {"type": "object"}
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return model_schema(tp)
    if origin is Literal:
        return {"type": "string", "enum": list(get_args(tp))}
    if origin is list:
        (item,) = get_args(tp)
        return {"type": "array", "items": _type_schema(item)}
    if origin is dict:
        _, value = get_args(tp)
        if value is Any:
            return {"type": "object"}
        return {"type": "object", "additionalProperties": _type_schema(value)}
    if _is_union(tp):
        return {}  # int | str: the IntOrString marker supplies the schema
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    raise TypeError(f"no CRD schema for type {tp!r}")


def _apply(schema: Schema, marks: Iterable[Any]) -> None:
    """Translate constraint objects and OpenAPI markers into schema keys."""
    is_array = schema.get("type") == "array"
    for mark in marks:
        if isinstance(mark, OpenAPI):
            schema.update(mark.keys)
        elif isinstance(mark, at.MinLen):
            schema["minItems" if is_array else "minLength"] = mark.min_length
        elif isinstance(mark, at.MaxLen):
            schema["maxItems" if is_array else "maxLength"] = mark.max_length
        elif isinstance(mark, at.Ge):
            schema["minimum"] = mark.ge
        elif isinstance(mark, at.Le):
            schema["maximum"] = mark.le
        elif hasattr(mark, "pattern") and isinstance(mark.pattern, str):
            schema["pattern"] = mark.pattern
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        schema.pop("additionalProperties", None)


def _short(text: str) -> str:
    """A docstring reduced to its first paragraph on one line."""
    first = text.strip().split("\n\n", 1)[0]
    return " ".join(first.split())
