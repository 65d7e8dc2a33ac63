"""Proto messages as JSON objects: the proto JSON mapping with the protos' field names and 64-bit integers as
numbers, on every protobuf runtime the stubs support.

The mapping writes 64-bit integers as strings (JavaScript's numbers lose precision past 2**53); protobuf 7's
`unquote_int64_if_possible` writes them as numbers where exact, and protobuf 6 has no such option. Seeds and token
counts are far below 2**53 and read back either way, so they are written as numbers here on both.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def message_to_dict(message: Message, print_defaults: bool = False) -> dict[str, Any]:
    """`print_defaults`: fields without presence at their default value are written too."""
    as_dict = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=print_defaults
    )
    _unquote_int64(as_dict, message.DESCRIPTOR)
    return as_dict


def _unquote_int64(as_dict: dict[str, Any], descriptor: Descriptor) -> None:
    for name, value in as_dict.items():
        field = descriptor.fields_by_name.get(name)
        if field is None:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            # JSON object keys stay strings; the values are unquoted.
            value_field = field.message_type.fields_by_name["value"]
            as_dict[name] = {key: _unquoted_value(entry, value_field) for key, entry in value.items()}
        elif field.is_repeated:
            as_dict[name] = [_unquoted_value(entry, field) for entry in value]
        else:
            as_dict[name] = _unquoted_value(value, field)


def _unquoted_value(value: Any, field: FieldDescriptor) -> Any:
    if field.type in _INT64_TYPES and isinstance(value, str):
        return int(value)
    if (
        field.type == FieldDescriptor.TYPE_MESSAGE
        and isinstance(value, dict)
        and not _is_well_known(field.message_type)
    ):
        _unquote_int64(value, field.message_type)
    return value


def _is_well_known(descriptor: Descriptor) -> bool:
    """google.protobuf's own types (Struct, Value, Duration...) have JSON forms of their own."""
    return descriptor.full_name.startswith("google.protobuf.")
