"""Field errors worded exactly as the apiserver (apimachinery) words them.

Admission answers must read like upstream's, because users, docs and tests match on text:
``MachinePool.cluster.x-k8s.io "mp" is invalid: spec.template.spec.version: Invalid value:
"1.2": must start with v``. This module reproduces apimachinery's ``field.Error`` bodies,
``NewInvalid`` aggregation and the label/annotation key rules. The MachinePool admission code
(``machinepool.webhooks.machinepool``) is the caller.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FieldError",
    "denied_status",
    "forbidden",
    "go_quote",
    "invalid",
    "invalid_status",
    "label_key_errors",
    "label_value_errors",
    "required",
    "too_long",
    "validate_annotations",
    "validate_labels",
]

_TYPE_WORDS = {
    "FieldValueRequired": "Required value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueInvalid": "Invalid value",
    "FieldValueTooLong": "Too long",
}
_NO_VALUE_TYPES = frozenset({"FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong"})


@dataclass(frozen=True)
class FieldError:
    """One problem with one field: apimachinery's ``field.Error``."""

    type: str
    field: str
    detail: str
    bad_value: Any = None

    def body(self) -> str:
        """The message without the field path (``ErrorBody``)."""
        words = _TYPE_WORDS[self.type]
        if self.type in _NO_VALUE_TYPES:
            text = words
        elif isinstance(self.bad_value, bool):
            text = f"{words}: {str(self.bad_value).lower()}"
        elif isinstance(self.bad_value, int | float):
            text = f"{words}: {self.bad_value}"
        elif isinstance(self.bad_value, str):
            text = f"{words}: {go_quote(self.bad_value)}"
        else:
            text = f"{words}: {json.dumps(self.bad_value, separators=(',', ':'))}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def required(path: str, detail: str) -> FieldError:
    return FieldError("FieldValueRequired", path, detail)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", path, detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", path, detail, value)


def too_long(path: str, max_bytes: int) -> FieldError:
    unit = "byte" if max_bytes == 1 else "bytes"
    return FieldError("FieldValueTooLong", path, f"may not be more than {max_bytes} {unit}")


def aggregate(errors: list[FieldError]) -> str:
    """Errors joined as apimachinery's aggregate does: duplicates dropped, brackets when many."""
    seen: list[str] = []
    for err in errors:
        text = str(err)
        if text not in seen:
            seen.append(text)
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


def invalid_status(group: str, kind: str, name: str, errors: list[FieldError]) -> dict[str, Any]:
    """A 422 ``Invalid`` Status, as ``apierrors.NewInvalid`` builds it."""
    qualified = f"{kind}.{group}" if group else kind
    return {
        "status": "Failure",
        "code": 422,
        "reason": "Invalid",
        "message": f"{qualified} {go_quote(name)} is invalid: {aggregate(errors)}",
        "details": {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [
                {"reason": err.type, "message": err.body(), "field": err.field} for err in errors
            ],
        },
    }


def denied_status(message: str) -> dict[str, Any]:
    """A 403 ``Forbidden`` Status: controller-runtime's answer to a plain (non-Status) error."""
    return {"status": "Failure", "code": 403, "reason": "Forbidden", "message": message}


_GO_ESCAPES = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t"}
_GO_ESCAPES |= {"\v": r"\v", "\\": "\\\\", '"': '\\"'}


def go_quote(value: str) -> str:
    """Go's ``%q``: double quotes, C-style escapes, printable Unicode kept as is."""
    out = []
    for ch in value:
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


# --- label and annotation keys ------------------------------------------------------------

_KEY_CHARS = "[A-Za-z0-9]"
_KEY_FMT = "(" + _KEY_CHARS + "[-A-Za-z0-9_.]*)?" + _KEY_CHARS
_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_KEY_RE = re.compile(_KEY_FMT)
_VALUE_FMT = "(" + _KEY_FMT + ")?"
_VALUE_RE = re.compile(_VALUE_FMT)
_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, "
    "'-', '_' or '.', and must start and end with an alphanumeric character"
)
_DNS_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _DNS_LABEL + "(\\." + _DNS_LABEL + ")*"
_SUBDOMAIN_RE = re.compile(_SUBDOMAIN_FMT)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)
_ANNOTATIONS_MAX_BYTES = 256 * 1024


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} bytes"


def _subdomain_errors(value: str) -> list[str]:
    errs = []
    if len(value.encode()) > 253:
        errs.append(_max_len(253))
    if not _SUBDOMAIN_RE.fullmatch(value):
        errs.append(_regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com"))
    return errs


def label_key_errors(key: str) -> list[str]:
    """apimachinery's ``IsQualifiedName``: an optional DNS-subdomain prefix, then a name."""
    parts = key.split("/")
    errs: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + msg for msg in _subdomain_errors(prefix))
    else:
        return [
            "a valid label key "
            + _regex_error(_KEY_MSG, _KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name.encode()) > 63:
        errs.append("name part " + _max_len(63))
    if not _KEY_RE.fullmatch(name):
        errs.append("name part " + _regex_error(_KEY_MSG, _KEY_FMT, "MyName", "my.name", "123-abc"))
    return errs


def label_value_errors(value: str) -> list[str]:
    """apimachinery's ``IsValidLabelValue``."""
    errs = []
    if len(value.encode()) > 63:
        errs.append(_max_len(63))
    if not _VALUE_RE.fullmatch(value):
        errs.append(_regex_error(_VALUE_MSG, _VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def validate_labels(labels: dict[str, Any], path: str) -> list[FieldError]:
    """``ValidateLabels``; keys are visited in sorted order so messages are reproducible."""
    errors: list[FieldError] = []
    for key in sorted(labels):
        value = labels[key]
        errors.extend(invalid(path, key, msg) for msg in label_key_errors(key))
        if isinstance(value, str):
            errors.extend(invalid(path, value, msg) for msg in label_value_errors(value))
    return errors


def validate_annotations(annotations: dict[str, Any], path: str) -> list[FieldError]:
    """``ValidateAnnotations``: case-insensitive qualified-name keys, 256 KiB in total."""
    errors: list[FieldError] = []
    for key in sorted(annotations):
        errors.extend(invalid(path, key, msg) for msg in label_key_errors(key.lower()))
    size = sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > _ANNOTATIONS_MAX_BYTES:
        errors.append(too_long(path, _ANNOTATIONS_MAX_BYTES))
    return errors
