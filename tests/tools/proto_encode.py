#!/usr/bin/python3
"""proto_encode.py - Protobuf messages in the Confluent wire format for the tests, written by
python3-protobuf's pure-Python implementation (Debian 12, 3.21), independent of idemd's decoder
(libprotobuf C++). Run it with /usr/bin/python3 (the interpreter python3-protobuf is installed
for). protoc only turns the .proto files into descriptors; the bytes are Python's.

    proto_encode.py encode --proto F [-I DIR]... --message NAME --schema-id N
                    [--key-field NAME | --key-message NAME --key-schema-id M [--key-proto K]]
                    [--records FILE] [--output FILE]
    proto_encode.py payments --count N --schema-id N [--dup-ratio R] [--seed S] [--accounts A]
                    [--partitions P] [--manifest FILE] [--output FILE]
    proto_encode.py payments-schema

Output: one message per line, KEYHEX<TAB>VALUEHEX[<TAB>PARTITION], the format
"idem-kafkatool produce-file" reads (KEYHEX '-': no key).
A framed value is 00, the schema id as 4 bytes big-endian, the message indexes (zigzag varints:
their count, then the path to the message type from the file's top level; the path [0] is
written as the single byte 00), then the message.

encode: one record per input line (stdin or --records; blank lines skipped): the message in the
proto3 JSON mapping (json_format.Parse: Timestamp as RFC 3339 text, bytes as base64, enums by
name or number, int64 as text or number, Struct as any JSON), or an envelope, an object whose
keys all start with '$':
  "$value": JSON           the message, as above
  "$message": NAME         the message type of this record instead of --message (full name)
  "$raw_hex": HEX          the value bytes verbatim, no framing
  "$body_hex": HEX         the bytes after the 5-byte header verbatim (indexes included)
  "$schema_id": N          frame this value with id N instead of --schema-id
  "$indexes_hex": HEX      these message-index bytes instead of the computed ones
  "$full_indexes": true    write the path [0] in its full form (02 00), not as the single 00
  "$key_text": TEXT        the Kafka key verbatim (UTF-8)
  "$partition": P          write the message to partition P
payments: the payment stream of "idem-kafkatool produce" (payment_stream.py: the same ids,
accounts, amounts, partitions and duplicates) as messages idem.test.Payment of the file
"payments-schema" prints (register it as PROTOBUF and pass its id): payment_id, account,
amount (int64), currency EUR, created (a Timestamp, 2025-01-01T00:00:00Z + i seconds).

Without "$key_text" the key is the text of the message's field NAME (--key-field; an integer in
decimal), or the message --key-message (in --key-proto, or in --proto) made of the value's fields of the same names,
framed with --key-schema-id, or none.
"""

import os

# The pure-Python implementation: the bytes must not come from the C++ library idemd links.
os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import payment_stream  # noqa: E402

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory  # noqa: E402
from google.protobuf import struct_pb2, timestamp_pb2, duration_pb2, wrappers_pb2, any_pb2  # noqa: E402,F401
from google.protobuf import empty_pb2, field_mask_pb2  # noqa: E402,F401
from google.protobuf.internal import api_implementation  # noqa: E402


def die(msg):
    print(f"proto_encode.py: {msg}", file=sys.stderr)
    sys.exit(1)


def load_pool(proto, include):
    """The default pool (well-known types in it) with PROTO and its imports added."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "set.pb")
        args = ["protoc", "--include_imports", f"--descriptor_set_out={out}"]
        for d in include or [os.path.dirname(os.path.abspath(proto))]:
            args.append(f"-I{d}")
        args.append(os.path.abspath(proto) if not include else proto)
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            die(f"protoc failed: {r.stderr.strip()}")
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    pool = descriptor_pool.Default()
    main = None
    for fdp in fds.file:
        main = fdp.name
        if fdp.name.startswith("google/protobuf/"):
            continue
        try:
            pool.FindFileByName(fdp.name)
            continue  # added already (the key's file beside the value's)
        except KeyError:
            pool.Add(fdp)
    return pool, main


PAYMENTS_PROTO = """syntax = "proto3";
package idem.test;
import "google/protobuf/timestamp.proto";
enum Currency {
  EUR = 0;
  USD = 1;
  GBP = 2;
  CHF = 3;
}
message Payment {
  string payment_id = 1;
  string account = 2;
  int64 amount = 3;
  Currency currency = 4;
  google.protobuf.Timestamp created = 5;
}
"""


def cmd_payments(argv):
    p = payment_stream.parser("proto_encode.py payments")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "payments.proto")
        with open(path, "w", encoding="utf-8") as f:
            f.write(PAYMENTS_PROTO)
        pool, _ = load_pool(path, [tmp])
    payment = message_factory.MessageFactory(pool).GetPrototype(pool.FindMessageTypeByName("idem.test.Payment"))
    idx = indexes_bytes(payment.DESCRIPTOR)

    def encode(pid, acct, amount, created_ms):
        m = payment(payment_id=pid, account=acct, amount=amount, currency=0)
        m.created.FromMilliseconds(created_ms)
        return frame(a.schema_id, idx, m.SerializeToString())

    return payment_stream.write(p, a, encode)


def zigzag(n):
    return (n << 1) ^ (n >> 63)


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def index_path(desc):
    """The path of message DESC from its file's top level."""
    path = []
    while desc is not None:
        parent = desc.containing_type
        siblings = parent.nested_types if parent is not None else list(desc.file.message_types_by_name.values())
        path.append([s.full_name for s in siblings].index(desc.full_name))
        desc = parent
    return list(reversed(path))


def indexes_bytes(desc, full=False):
    path = index_path(desc)
    if path == [0] and not full:
        return b"\x00"
    return varint(zigzag(len(path))) + b"".join(varint(zigzag(i)) for i in path)


def frame(schema_id, indexes, body):
    return b"\x00" + schema_id.to_bytes(4, "big") + indexes + body


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "payments":
        return cmd_payments(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "payments-schema":
        sys.stdout.write(PAYMENTS_PROTO)
        return 0
    p = argparse.ArgumentParser(prog="proto_encode.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("encode")
    e.add_argument("--proto", required=True)
    e.add_argument("-I", dest="include", action="append", default=[])
    e.add_argument("--message", required=True)
    e.add_argument("--schema-id", type=int, required=True)
    e.add_argument("--key-field")
    e.add_argument("--key-message")
    e.add_argument("--key-schema-id", type=int)
    e.add_argument("--key-proto", help="the file of --key-message, if not --proto")
    e.add_argument("--records")
    e.add_argument("--output")
    sub.add_parser("implementation")
    a = p.parse_args()
    if a.cmd == "implementation":
        print(api_implementation.Type())
        return 0

    pool, _ = load_pool(a.proto, a.include)
    if a.key_proto:
        load_pool(a.key_proto, a.include)
    factory = message_factory.MessageFactory(pool)

    def cls(name):
        try:
            return factory.GetPrototype(pool.FindMessageTypeByName(name))
        except KeyError:
            die(f"no message type {name!r}")

    src = open(a.records, encoding="utf-8") if a.records else sys.stdin
    out = open(a.output, "w", encoding="ascii") if a.output else sys.stdout
    for lineno, line in enumerate(src, 1):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError as ex:
            die(f"line {lineno}: not JSON: {ex}")
        env = rec if isinstance(rec, dict) and rec and all(k.startswith("$") for k in rec) else {"$value": rec}
        part = env.get("$partition")
        key = None
        if "$raw_hex" in env:
            value = bytes.fromhex(env["$raw_hex"])
        elif "$body_hex" in env:
            value = frame(env.get("$schema_id", a.schema_id), b"", bytes.fromhex(env["$body_hex"]))
        else:
            mcls = cls(env.get("$message", a.message))
            msg = mcls()
            try:
                json_format.Parse(json.dumps(env["$value"]), msg)
            except json_format.ParseError as ex:
                die(f"line {lineno}: {ex}")
            if "$indexes_hex" in env:
                idx = bytes.fromhex(env["$indexes_hex"])
            else:
                idx = indexes_bytes(msg.DESCRIPTOR, env.get("$full_indexes", False))
            value = frame(env.get("$schema_id", a.schema_id), idx, msg.SerializeToString())
            if a.key_field:
                v = env["$value"].get(a.key_field)
                key = None if v is None else str(v).encode()
            elif a.key_message:
                kcls = cls(a.key_message)
                kmsg = kcls()
                names = {f.name for f in kmsg.DESCRIPTOR.fields}
                json_format.Parse(json.dumps({k: v for k, v in env["$value"].items() if k in names}), kmsg)
                key = frame(a.key_schema_id, indexes_bytes(kmsg.DESCRIPTOR), kmsg.SerializeToString())
        if "$key_text" in env:
            key = env["$key_text"].encode()
        cols = ["-" if key is None else key.hex(), value.hex()]
        if part is not None:
            cols.append(str(part))
        out.write("\t".join(cols) + "\n")
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
