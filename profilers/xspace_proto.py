"""Protobuf message classes for the parts of XSpace and HloProto porter reads.

Why our own schema: the installed jax/xprof wheels parse XSpace in C++ and ship no
Python ``xplane_pb2``; declaring the fields we need (numbers as in tsl's xplane.proto and
xla's hlo.proto) lets the upb runtime do the parsing, and every field we do not name is
skipped. Text fields are declared ``bytes`` so a name with invalid UTF-8 is decoded with
replacement instead of failing the whole file. Map fields are declared as repeated
key/value entries, which is the same wire format.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

__all__ = ["DecodeError", "parse_xspace", "parse_hlo_proto"]

_F = descriptor_pb2.FieldDescriptorProto
_REP, _OPT = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
_I64, _U64, _DBL, _BYTES, _MSG = _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE, _F.TYPE_BYTES, _F.TYPE_MESSAGE

# message -> (field name, number, type, repeated?, message type name)
_MESSAGES: dict[str, tuple[tuple[str, int, int, bool, str], ...]] = {
    "XSpace": (
        ("planes", 1, _MSG, True, "XPlane"),
        ("errors", 2, _BYTES, True, ""),
        ("warnings", 3, _BYTES, True, ""),
        ("hostnames", 4, _BYTES, True, ""),
    ),
    "XPlane": (
        ("id", 1, _I64, False, ""),
        ("name", 2, _BYTES, False, ""),
        ("lines", 3, _MSG, True, "XLine"),
        ("event_metadata", 4, _MSG, True, "EventMetadataEntry"),
        ("stat_metadata", 5, _MSG, True, "StatMetadataEntry"),
        ("stats", 6, _MSG, True, "XStat"),
    ),
    "EventMetadataEntry": (("key", 1, _I64, False, ""), ("value", 2, _MSG, False, "XEventMetadata")),
    "StatMetadataEntry": (("key", 1, _I64, False, ""), ("value", 2, _MSG, False, "XStatMetadata")),
    "XLine": (
        ("id", 1, _I64, False, ""),
        ("name", 2, _BYTES, False, ""),
        ("timestamp_ns", 3, _I64, False, ""),
        ("events", 4, _MSG, True, "XEvent"),
        ("duration_ps", 9, _I64, False, ""),
        ("display_id", 10, _I64, False, ""),
        ("display_name", 11, _BYTES, False, ""),
    ),
    "XEvent": (
        ("metadata_id", 1, _I64, False, ""),
        ("offset_ps", 2, _I64, False, ""),
        ("duration_ps", 3, _I64, False, ""),
        ("stats", 4, _MSG, True, "XStat"),
        ("num_occurrences", 5, _I64, False, ""),
    ),
    "XStat": (
        ("metadata_id", 1, _I64, False, ""),
        ("double_value", 2, _DBL, False, ""),
        ("uint64_value", 3, _U64, False, ""),
        ("int64_value", 4, _I64, False, ""),
        ("str_value", 5, _BYTES, False, ""),
        ("bytes_value", 6, _BYTES, False, ""),
        ("ref_value", 7, _U64, False, ""),
    ),
    "XEventMetadata": (
        ("id", 1, _I64, False, ""),
        ("name", 2, _BYTES, False, ""),
        ("metadata", 3, _BYTES, False, ""),
        ("display_name", 4, _BYTES, False, ""),
        ("stats", 5, _MSG, True, "XStat"),
        ("child_id", 6, _I64, True, ""),
    ),
    "XStatMetadata": (
        ("id", 1, _I64, False, ""),
        ("name", 2, _BYTES, False, ""),
        ("description", 3, _BYTES, False, ""),
    ),
    # xla/service/hlo.proto, only what op attribution needs.
    "HloProto": (("hlo_module", 1, _MSG, False, "HloModuleProto"),),
    "HloModuleProto": (
        ("name", 1, _BYTES, False, ""),
        ("entry_computation_name", 2, _BYTES, False, ""),
        ("computations", 3, _MSG, True, "HloComputationProto"),
        ("id", 5, _I64, False, ""),
        ("entry_computation_id", 6, _I64, False, ""),
    ),
    "HloComputationProto": (
        ("name", 1, _BYTES, False, ""),
        ("instructions", 2, _MSG, True, "HloInstructionProto"),
        ("id", 5, _I64, False, ""),
        ("root_id", 6, _I64, False, ""),
    ),
    "HloInstructionProto": (
        ("name", 1, _BYTES, False, ""),
        ("opcode", 2, _BYTES, False, ""),
        ("shape", 3, _MSG, False, "ShapeProto"),
        ("metadata", 7, _MSG, False, "OpMetadata"),
        ("parameter_number", 9, _I64, False, ""),
        ("custom_call_target", 28, _BYTES, False, ""),
        ("dot_dimension_numbers", 30, _MSG, False, "DotDimensionNumbers"),
        ("id", 35, _I64, False, ""),
        ("operand_ids", 36, _I64, True, ""),
        ("called_computation_ids", 38, _I64, True, ""),
    ),
    # xla/xla_data.proto: result shapes and dot contraction, for FLOPs and bytes (profilers.hlo_cost).
    "ShapeProto": (
        ("element_type", 2, _I64, False, ""),
        ("dimensions", 3, _I64, True, ""),
        ("tuple_shapes", 4, _MSG, True, "ShapeProto"),
    ),
    "DotDimensionNumbers": (
        ("lhs_contracting_dimensions", 1, _I64, True, ""),
        ("rhs_contracting_dimensions", 2, _I64, True, ""),
        ("lhs_batch_dimensions", 3, _I64, True, ""),
        ("rhs_batch_dimensions", 4, _I64, True, ""),
    ),
    "OpMetadata": (
        ("op_type", 1, _BYTES, False, ""),
        ("op_name", 2, _BYTES, False, ""),
        ("source_file", 3, _BYTES, False, ""),
        ("source_line", 4, _I64, False, ""),
    ),
}

# message -> (oneof name, field numbers in it): XStat says which value it holds.
_ONEOFS: dict[str, tuple[str, frozenset[int]]] = {"XStat": ("value", frozenset({2, 3, 4, 5, 6, 7}))}

_PACKAGE = "porter_xspace"


@lru_cache(maxsize=1)
def _classes() -> dict[str, Any]:
    fdp = descriptor_pb2.FileDescriptorProto(name="porter_xspace.proto", package=_PACKAGE, syntax="proto3")
    for msg_name, fields in _MESSAGES.items():
        msg = fdp.message_type.add(name=msg_name)
        oneof = _ONEOFS.get(msg_name)
        if oneof:
            msg.oneof_decl.add(name=oneof[0])
        for fname, number, ftype, repeated, type_name in fields:
            field = msg.field.add(name=fname, number=number, type=ftype, label=_REP if repeated else _OPT)
            if oneof and number in oneof[1]:
                field.oneof_index = 0
            if type_name:
                field.type_name = f".{_PACKAGE}.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}")) for name in _MESSAGES}


def parse_xspace(data: bytes) -> Any:
    """An XSpace message from serialized bytes; raises DecodeError on malformed data."""
    msg = _classes()["XSpace"]()
    msg.ParseFromString(data)
    return msg


def parse_hlo_proto(data: bytes) -> Any:
    """An HloProto message (the ``Hlo Proto`` stat XLA stores per program)."""
    msg = _classes()["HloProto"]()
    msg.ParseFromString(data)
    return msg
