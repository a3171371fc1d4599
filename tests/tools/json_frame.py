#!/usr/bin/python3
"""json_frame.py - JSON Schema values in the Confluent wire format for the tests (standard library
only): byte 0 is 0, bytes 1-4 the schema id (big-endian), then the JSON document, as Confluent's
KafkaJsonSchemaSerializer writes them.

    json_frame.py --schema-id N [--key-field NAME] [--input FILE] [--output FILE]

    json_frame.py payments --count N --schema-id N [--dup-ratio R] [--seed S] [--accounts A]
                  [--partitions P] [--manifest FILE] [--output FILE]
    json_frame.py payments-schema

payments: the payment stream of "idem-kafkatool produce" (payment_stream.py), each value the
very JSON text idem-kafkatool writes behind the header; payments-schema prints a draft-07 schema
of those payments, strict enough to cost what validation costs (types, required members, a
pattern, bounds).

One document per input line (stdin or --input; blank lines skipped), framed as it is: its bytes
are not parsed again or re-serialized (so a line that is not JSON is framed too, for tests of bad
input). Output: one message per line, KEYHEX<TAB>VALUEHEX, the format "idem-kafkatool
produce-file" reads (as avro_encode.py writes it). KEYHEX is '-' (no key) unless --key-field
names a top-level member of the document: then the key is its text (a string as it is, any other
value as its JSON text); a line that is not a JSON object, or lacks the member, has no key.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import payment_stream  # noqa: E402

PAYMENTS_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Payment",
    "type": "object",
    "properties": {
        "payment_id": {"type": "string", "minLength": 1, "maxLength": 64},
        "account": {"type": "string", "pattern": "^acct-[0-9]+$"},
        "amount": {"type": "integer", "minimum": 1, "maximum": 1000000},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"]},
        "ts": {"type": "integer", "minimum": 0},
    },
    "required": ["payment_id", "account", "amount", "currency", "ts"],
    "additionalProperties": False,
}


def header(schema_id):
    return b"\x00" + schema_id.to_bytes(4, "big")


def cmd_payments(argv):
    p = payment_stream.parser("json_frame.py payments")
    a = p.parse_args(argv)
    h = header(a.schema_id)

    def encode(pid, acct, amount, created_ms):
        # Byte for byte idem_kafkatool.c's value.
        doc = f'{{"payment_id":"{pid}","account":"{acct}","amount":{amount},"currency":"EUR","ts":{created_ms}}}'
        return h + doc.encode()

    return payment_stream.write(p, a, encode)


def key_of(line, field):
    if field is None:
        return None
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or field not in doc:
        return None
    v = doc[field]
    return (v if isinstance(v, str) else json.dumps(v)).encode()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "payments":
        return cmd_payments(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "payments-schema":
        print(json.dumps(PAYMENTS_SCHEMA, indent=1))
        return 0
    p = argparse.ArgumentParser(prog="json_frame.py")
    p.add_argument("--schema-id", type=int, required=True)
    p.add_argument("--key-field")
    p.add_argument("--input")
    p.add_argument("--output")
    a = p.parse_args()
    if not 0 <= a.schema_id <= 0xFFFFFFFF:
        p.error("--schema-id must fit in 4 bytes")
    hdr = header(a.schema_id)
    src = open(a.input, "rb") if a.input else sys.stdin.buffer
    out = open(a.output, "w") if a.output else sys.stdout
    for raw in src:
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            continue
        key = key_of(line, a.key_field)
        out.write(f"{'-' if key is None else key.hex()}\t{(hdr + line).hex()}\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
