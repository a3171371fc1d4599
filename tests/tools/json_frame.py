#!/usr/bin/python3
"""json_frame.py - JSON Schema values in the Confluent wire format for the tests (standard library
only): byte 0 is 0, bytes 1-4 the schema id (big-endian), then the JSON document, as Confluent's
KafkaJsonSchemaSerializer writes them.

    json_frame.py --schema-id N [--key-field NAME] [--input FILE] [--output FILE]

One document per input line (stdin or --input; blank lines skipped), framed as it is: its bytes
are not parsed again or re-serialized (so a line that is not JSON is framed too, for tests of bad
input). Output: one message per line, KEYHEX<TAB>VALUEHEX, the format "idem-kafkatool
produce-file" reads (as avro_encode.py writes it). KEYHEX is '-' (no key) unless --key-field
names a top-level member of the document: then the key is its text (a string as it is, any other
value as its JSON text); a line that is not a JSON object, or lacks the member, has no key.
"""

import argparse
import json
import sys


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
    p = argparse.ArgumentParser(prog="json_frame.py")
    p.add_argument("--schema-id", type=int, required=True)
    p.add_argument("--key-field")
    p.add_argument("--input")
    p.add_argument("--output")
    a = p.parse_args()
    if not 0 <= a.schema_id <= 0xFFFFFFFF:
        p.error("--schema-id must fit in 4 bytes")
    header = b"\x00" + a.schema_id.to_bytes(4, "big")
    src = open(a.input, "rb") if a.input else sys.stdin.buffer
    out = open(a.output, "w") if a.output else sys.stdout
    for raw in src:
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            continue
        key = key_of(line, a.key_field)
        out.write(f"{'-' if key is None else key.hex()}\t{(header + line).hex()}\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
