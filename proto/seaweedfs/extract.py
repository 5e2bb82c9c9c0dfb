#!/usr/bin/env python3
"""Writes filer.proto from the descriptor a `weed` binary embeds.

SeaweedFS's Go code embeds each .proto's FileDescriptorProto; this reads the
one named filer.proto out of the binary and prints it as proto3 text, so
ringfeed's copy has exactly the field numbers and types of the `weed` it was
taken from (comments are not in a descriptor). Usage:

    python3 proto/seaweedfs/extract.py /path/to/weed "$(weed version | head -1)" \
        > proto/seaweedfs/filer.proto

(the binary itself: with pyenv, `pyenv which weed`, not its shim).

Needs the `protobuf` Python package.
"""
import sys

from google.protobuf import descriptor_pb2

F = descriptor_pb2.FieldDescriptorProto
SCALARS = {
    F.TYPE_DOUBLE: "double", F.TYPE_FLOAT: "float", F.TYPE_INT64: "int64",
    F.TYPE_UINT64: "uint64", F.TYPE_INT32: "int32", F.TYPE_FIXED64: "fixed64",
    F.TYPE_FIXED32: "fixed32", F.TYPE_BOOL: "bool", F.TYPE_STRING: "string",
    F.TYPE_BYTES: "bytes", F.TYPE_UINT32: "uint32", F.TYPE_SFIXED32: "sfixed32",
    F.TYPE_SFIXED64: "sfixed64", F.TYPE_SINT32: "sint32", F.TYPE_SINT64: "sint64",
}


def varint(data, at):
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def descriptor(binary):
    start = binary.find(b"\n\x0bfiler.proto\x12\x08filer_pb")
    if start < 0:
        sys.exit("no filer.proto descriptor in the binary")
    at, first = start, True
    while True:  # top-level fields until the next file's name (field 1)
        key, after = varint(binary, at)
        number, wire = key >> 3, key & 7
        if (number == 1 and not first) or wire not in (0, 2) or number > 14:
            break
        first = False
        value, after = varint(binary, after)
        at = after + (value if wire == 2 else 0)
    return descriptor_pb2.FileDescriptorProto.FromString(binary[start:at])


def type_name(field, scope):
    if field.type in SCALARS:
        return SCALARS[field.type]
    name = field.type_name
    prefix = "." + scope + "."
    return name[len(prefix):] if name.startswith(prefix) else name.lstrip(".")


def message(m, scope, indent, out):
    pad = "    " * indent
    out.append(f"{pad}message {m.name} {{")
    inner = f"{scope}.{m.name}"
    maps = {n.name: n for n in m.nested_type if n.options.map_entry}
    for e in m.enum_type:
        enum(e, indent + 1, out)
    for n in m.nested_type:
        if not n.options.map_entry:
            message(n, inner, indent + 1, out)
    oneofs = {}
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            oneofs.setdefault(f.oneof_index, []).append(f)
    done = set()
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            if f.oneof_index in done:
                continue
            done.add(f.oneof_index)
            out.append(f"{pad}    oneof {m.oneof_decl[f.oneof_index].name} {{")
            for g in oneofs[f.oneof_index]:
                out.append(f"{pad}        {type_name(g, inner)} {g.name} = {g.number};")
            out.append(f"{pad}    }}")
            continue
        entry = maps.get(f.type_name.rsplit(".", 1)[-1]) if f.type == F.TYPE_MESSAGE else None
        if entry is not None and f.label == F.LABEL_REPEATED:
            k, v = entry.field
            out.append(f"{pad}    map<{type_name(k, inner)}, {type_name(v, inner)}> {f.name} = {f.number};")
            continue
        label = "repeated " if f.label == F.LABEL_REPEATED else ("optional " if f.proto3_optional else "")
        out.append(f"{pad}    {label}{type_name(f, inner)} {f.name} = {f.number};")
    out.append(f"{pad}}}")


def enum(e, indent, out):
    pad = "    " * indent
    out.append(f"{pad}enum {e.name} {{")
    for v in e.value:
        out.append(f"{pad}    {v.name} = {v.number};")
    out.append(f"{pad}}}")


def main():
    fd = descriptor(open(sys.argv[1], "rb").read())
    out = [
        "// SeaweedFS's filer gRPC API (weed/pb/filer.proto), Apache-2.0, as the",
        "// `weed` binary it was read from embeds it: written by extract.py, do not",
        "// edit. Field numbers and types are the binary's; comments are not kept.",
        f"// Read from: {sys.argv[2] if len(sys.argv) > 2 else 'weed'}.",
        "",
        f'syntax = "{fd.syntax or "proto3"}";',
        "",
        f"package {fd.package};",
        "",
    ]
    for e in fd.enum_type:
        enum(e, 0, out)
        out.append("")
    for s in fd.service:
        out.append(f"service {s.name} {{")
        for m in s.method:
            arg = ("stream " if m.client_streaming else "") + m.input_type.split(".")[-1]
            ret = ("stream " if m.server_streaming else "") + m.output_type.split(".")[-1]
            out.append(f"    rpc {m.name} ({arg}) returns ({ret});")
        out.append("}")
        out.append("")
    for m in fd.message_type:
        message(m, fd.package, 0, out)
        out.append("")
    print("\n".join(out).rstrip())


if __name__ == "__main__":
    main()
