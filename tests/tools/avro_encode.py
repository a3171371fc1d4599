#!/usr/bin/python3
"""avro_encode.py - Avro messages in the Confluent wire format for the tests, written with Apache
Avro's own Python library (Debian python3-avro 1.11), independent of idemd's decoder (avro-c).
Run it with /usr/bin/python3 (the interpreter python3-avro is installed for).

    avro_encode.py [encode] --schema-file F --schema-id N [--records FILE] [--output FILE]
                   [--key-field NAME | --key-schema-file K --key-schema-id M
                   [--key-record-field NAME]]
    avro_encode.py payments --count N --schema-id N [--dup-ratio R] [--seed S] [--accounts A]
                   [--partitions P] [--manifest FILE] [--output FILE]
    avro_encode.py payments-schema
    avro_encode.py decode --schema-file F [--key-schema-file K] [--input FILE]

Output (encode, payments): one message per line, KEYHEX<TAB>VALUEHEX[<TAB>PARTITION], the format
"idem-kafkatool produce-file" reads. KEYHEX '-' is no key (NULL), VALUEHEX '-' a NULL value
(tombstone), '' an empty one; PARTITION only where a record or --partitions asks for one.
A framed value is 00, the schema id as 4 bytes big-endian, then the Avro binary encoding.

encode: one record per input line (stdin or --records; blank lines skipped), the JSON form of
the datum for the value schema, with tagged objects for what JSON cannot say:
  {"$bytes_hex": "0a1b"}     bytes (also for fixed, decimal as raw bytes, duration)
  {"$bytes": "text"}         bytes: the UTF-8 of text
  {"$decimal": "-123.45"}    decimal (bytes or fixed): rescaled to the schema's scale (an error
                             if that loses digits); precision is not checked
  {"$date": "2024-05-01"}    date
  {"$time": "12:34:56.789"}  time-millis / time-micros
  {"$ts": "2024-05-01T12:34:56.789123Z"}  timestamp-millis/-micros: ISO 8601, no offset
                             means UTC, millis floored; local-timestamp-millis/-micros (which
                             python-avro 1.11 does not know; done here): the wall-clock time
                             as written, any offset ignored
  {"$union": I, "value": V}  the union branch chosen explicitly: I is the 0-based index or the
                             branch's type name ("long", "null", a record's name or full name)
  {"$map": {...}}            an object taken as a map with literal keys (for keys starting '$')
A plain number for a date/time/timestamp field is written as is (days, ms or us since the
epoch); a uuid is a plain string (any string is accepted: the wire form is a string). JSON
accepts NaN, Infinity and -Infinity for float/double. Records need every field (python-avro
writes no defaults; a missing field is null, valid only if the field's type allows null).
Without "$union" a union takes the FIRST branch the value fits (python-avro itself would take
the last: 5 in ["int","long"] as a long, true in ["boolean","int"] as int 1); an int never fits
float/double/boolean branches ahead of int/long, a bool never an int/long one.

A line may instead be an envelope, an object whose keys all come from:
  "$value": DATUM | "$raw_hex": HEX (the value bytes verbatim, no framing) | "$tombstone": true
  "$key": DATUM (encoded like a record's key, see below) | "$key_hex": HEX | "$key_text": TEXT
  | "$no_key": true
  "$schema_id": N  frame this value with id N instead of --schema-id (the encoding is unchanged)
  "$partition": P  write the message to partition P
  e.g. {"$raw_hex": "0100000001"} (bad magic byte), {"$value": {...}, "$schema_id": 999}.
Without a key item the key comes from the value record as the options say:
  --key-field NAME          the text of the record's field NAME (string as is, integer in
                            decimal, bytes verbatim; null: no key)
  --key-schema-file K --key-schema-id M [--key-record-field NAME]
                            the key Avro-encoded with schema K and framed with id M. The key
                            datum is the field NAME of the value record; without
                            --key-record-field, K must be a record, and the key is the value
                            record's fields of the same names (e.g. K = {"type":"record",
                            "name":"PaymentKey","fields":[{"name":"payment_id","type":"string"}]}).
                            A "$key" item is then a datum for K.
  neither                   no key ("$key" is then the key's text)

payments: the payment stream of "idem-kafkatool produce" (same RNG, same draws: with
--partitions equal to the topic's partition count, the same payment ids, accounts, amounts and
duplicates as "idem-kafkatool produce" with the same --count --dup-ratio --seed --accounts),
as Avro records of the schema "payments-schema" prints (register that and pass its id):
  payment_id "pay-S-i", account "acct-K", amount 1..10000 (long), currency EUR (enum Currency),
  created timestamp-millis 2025-01-01T00:00:00Z + i seconds.
Key: the payment id as text. A duplicate re-sends the earlier message byte for byte. With
--partitions P every line names its partition as produce does (FNV-1a of the account mod P,
20% of the duplicates to another partition); without it there is no partition column, keys
place the messages (a payment's duplicates share its partition). --manifest FILE gets
payment_id,account,amount per unique payment (CSV). Prints produced=N unique=U duplicates=D on
stdout if --output is given, else on stderr.

decode: the reverse, for checking: each input line KEYHEX<TAB>VALUEHEX (or only VALUEHEX) is
decoded (framing checked, every byte used) and printed as one JSON line
{"key": ..., "key_schema_id": ..., "schema_id": N, "value": DATUM} with the tags above.
"""

import argparse
import datetime
import decimal
import io
import json
import sys
import warnings

import avro.errors
import avro.io
import avro.schema

import payment_stream

warnings.simplefilter("ignore", avro.errors.IgnoredLogicalType)

UTC = datetime.timezone.utc
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
NUMERIC = ("int", "long", "float", "double")
ENVELOPE_KEYS = {"$value", "$raw_hex", "$tombstone", "$key", "$key_hex", "$key_text", "$no_key",
                 "$schema_id", "$partition"}

PAYMENT_SCHEMA = {
    "type": "record",
    "name": "Payment",
    "namespace": "idem.test",
    "fields": [
        {"name": "payment_id", "type": "string"},
        {"name": "account", "type": "string"},
        {"name": "amount", "type": "long"},
        {"name": "currency", "type": {"type": "enum", "name": "Currency", "symbols": ["EUR", "USD", "GBP", "CHF"]}},
        {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


class EncodeError(Exception):
    pass


# ---- tagged JSON -> Python values ---------------------------------------------------------------


class Branch:
    """An explicitly chosen union branch ({"$union": I, "value": V})."""

    __slots__ = ("sel", "value")

    def __init__(self, sel, value):
        self.sel = sel
        self.value = value


def parse_ts(text):
    ts = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def from_tag(tag, arg):
    if tag == "$bytes_hex":
        return bytes.fromhex(arg)
    if tag == "$bytes":
        return arg.encode("utf-8")
    if tag == "$decimal":
        if not isinstance(arg, str):
            raise EncodeError('"$decimal" takes a string, e.g. {"$decimal": "-123.45"}')
        return decimal.Decimal(arg)
    if tag == "$date":
        return datetime.date.fromisoformat(arg)
    if tag == "$time":
        return datetime.time.fromisoformat(arg)
    if tag == "$ts":
        return parse_ts(arg)
    if tag == "$map":
        if not isinstance(arg, dict):
            raise EncodeError('"$map" takes an object')
        return {k: from_json(v) for k, v in arg.items()}
    raise EncodeError(f"unknown tag '{tag}' (for a map key starting with '$' use {{\"$map\": {{...}}}})")


def from_json(v):
    """The Python value python-avro writes for the tagged JSON value @v."""
    if isinstance(v, dict):
        if len(v) == 1:
            (k, arg), = v.items()
            if k.startswith("$"):
                try:
                    return from_tag(k, arg)
                except (ValueError, TypeError, decimal.InvalidOperation) as e:
                    raise EncodeError(f"invalid {k} {arg!r}: {e}")
        if set(v) == {"$union", "value"}:
            return Branch(v["$union"], from_json(v["value"]))
        return {k: from_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [from_json(x) for x in v]
    return v


def to_json(v):
    """The tagged JSON form of a value python-avro read (for decode)."""
    if isinstance(v, dict):
        out = {k: to_json(x) for k, x in v.items()}
        return {"$map": out} if any(k.startswith("$") for k in v) else out
    if isinstance(v, list):
        return [to_json(x) for x in v]
    if isinstance(v, bytes):
        return {"$bytes_hex": v.hex()}
    if isinstance(v, decimal.Decimal):
        return {"$decimal": str(v)}
    if isinstance(v, datetime.datetime):
        return {"$ts": v.astimezone(UTC).isoformat().replace("+00:00", "Z")}
    if isinstance(v, datetime.date):
        return {"$date": v.isoformat()}
    if isinstance(v, datetime.time):
        return {"$time": v.isoformat()}
    return v


# ---- checking a datum against a schema --------------------------------------------------------


LOCAL_TS = ("local-timestamp-millis", "local-timestamp-micros")


def logical(s):
    """The logical type python-avro applies to @s (or a local-timestamp-*, which we do)."""
    lt = getattr(s, "logical_type", None)
    if lt is None and hasattr(s, "get_prop") and s.get_prop("logicalType") in LOCAL_TS:
        lt = s.get_prop("logicalType")
    return lt


def describe(s):
    lt = logical(s)
    name = getattr(s, "fullname", None) or s.type
    return f"{name} ({lt})" if lt else name


def branch_index(s, sel, path):
    if isinstance(sel, int) and not isinstance(sel, bool):
        if 0 <= sel < len(s.schemas):
            return sel
        raise EncodeError(f"{path}: union has no branch {sel}")
    for i, b in enumerate(s.schemas):
        if sel in (b.type, getattr(b, "name", None), getattr(b, "fullname", None)):
            return i
    raise EncodeError(f"{path}: union has no branch named {sel!r}")


def check(s, d, path):
    """Raise EncodeError (with the path to the offending value) unless @d can be written as @s."""
    t = s.type
    if isinstance(d, Branch):
        if t != "union":
            raise EncodeError(f"{path}: \"$union\" given for a {describe(s)}, not a union")
        i = branch_index(s, d.sel, path)
        check(s.schemas[i], d.value, f"{path}<{i}>")
        return
    if t == "union":
        if union_pick(s, d) is None:
            raise EncodeError(f"{path}: {d!r} fits no branch of {json.dumps(s.to_json())}")
        return
    if t in ("record", "error", "request"):
        if not isinstance(d, dict):
            raise EncodeError(f"{path}: {describe(s)} needs an object, not {d!r}")
        names = [f.name for f in s.fields]
        extra = sorted(set(d) - set(names))
        if extra:
            raise EncodeError(f"{path}: {describe(s)} has no field(s) {', '.join(extra)}")
        for f in s.fields:
            if f.name not in d and not fits(f.type, None):
                raise EncodeError(f"{path}.{f.name}: missing (python-avro writes no defaults)")
            check(f.type, d.get(f.name), f"{path}.{f.name}")
        return
    if t == "array":
        if not isinstance(d, list):
            raise EncodeError(f"{path}: array needs a list, not {d!r}")
        for i, x in enumerate(d):
            check(s.items, x, f"{path}[{i}]")
        return
    if t == "map":
        if not isinstance(d, dict):
            raise EncodeError(f"{path}: map needs an object, not {d!r}")
        for k, x in d.items():
            check(s.values, x, f"{path}[{k!r}]")
        return
    if not fits_scalar(s, d):
        raise EncodeError(f"{path}: {d!r} is no {describe(s)}")


def fits_scalar(s, d):
    t, lt = s.type, logical(s)
    if isinstance(d, bool) and t != "boolean":
        return False
    if t == "enum":
        return isinstance(d, str) and d in s.symbols
    if t == "fixed":
        return (isinstance(d, bytes) and len(d) == s.size) or (lt == "decimal" and isinstance(d, decimal.Decimal))
    if t == "bytes":
        return isinstance(d, bytes) or (lt == "decimal" and isinstance(d, decimal.Decimal))
    if t == "int" and lt == "date" and isinstance(d, datetime.date) and not isinstance(d, datetime.datetime):
        return True
    if t == "int" and lt == "time-millis" and isinstance(d, datetime.time):
        return True
    if t == "long" and lt == "time-micros" and isinstance(d, datetime.time):
        return True
    if t == "long" and lt in ("timestamp-millis", "timestamp-micros") + LOCAL_TS and isinstance(d, datetime.datetime):
        return True
    if t in ("int", "long", "string", "null", "boolean", "float", "double"):
        return avro.schema.PrimitiveSchema._validators[t](d)
    return False


def fits(s, d):
    try:
        check(s, d, "")
        return True
    except EncodeError:
        return False


def union_pick(s, d):
    """The first branch @d fits, preferring int/long over float/double for an integer."""
    order = list(range(len(s.schemas)))
    if isinstance(d, int) and not isinstance(d, bool):
        order.sort(key=lambda i: 0 if s.schemas[i].type in ("int", "long") else 1)
    for i in order:
        if fits(s.schemas[i], d):
            return i
    return None


# ---- writing ----------------------------------------------------------------------------------


def rescale(d, scale, what):
    if not d.is_finite():
        raise EncodeError(f"{what}: {d} is not finite")
    with decimal.localcontext() as ctx:
        ctx.prec = 4000
        q = d.quantize(decimal.Decimal(1).scaleb(-scale))
        if q != d:
            raise EncodeError(f"{what}: {d} has more than {scale} digit(s) after the point")
        # python-avro writes the digits as they stand (1.5 at scale 2 would be 0.15) and
        # writes -0 as -2: give it exactly `scale` fraction digits and no negative zero.
        return q.copy_abs() if q.is_zero() else q


class Encoder(avro.io.BinaryEncoder):
    """python-avro's encoder, with decimals rescaled to the schema's scale first."""

    def write_decimal_bytes(self, datum, scale):
        super().write_decimal_bytes(rescale(datum, scale, "decimal"), scale)

    def write_decimal_fixed(self, datum, scale, size):
        q = rescale(datum, scale, "decimal")
        unscaled = int(q.scaleb(scale))
        if not -(1 << (8 * size - 1)) <= unscaled < (1 << (8 * size - 1)):
            raise EncodeError(f"decimal: {datum} does not fit in fixed({size})")
        super().write_decimal_fixed(q, scale, size)


class Writer(avro.io.DatumWriter):
    """python-avro's DatumWriter with union branches chosen as documented above."""

    def write(self, datum, encoder, checked=True):
        if checked:
            check(self.writers_schema, datum, "$")
        self.write_data(self.writers_schema, datum, encoder)

    def write_data(self, s, datum, encoder):
        lt = s.props.get("logicalType")
        if lt in LOCAL_TS and isinstance(datum, datetime.datetime):
            # Not a logical type python-avro 1.11 knows: the wall-clock time as if in UTC.
            us = (datum.replace(tzinfo=UTC) - EPOCH) // datetime.timedelta(microseconds=1)
            return encoder.write_long(us // 1000 if lt == "local-timestamp-millis" else us)
        return super().write_data(s, datum, encoder)

    def write_union(self, s, datum, encoder):
        if isinstance(datum, Branch):
            i, datum = branch_index(s, datum.sel, "$"), datum.value
        else:
            i = union_pick(s, datum)
        encoder.write_long(i)
        return self.write_data(s.schemas[i], datum, encoder)


class Codec:
    """A cached writer for one schema, framing with one schema id."""

    def __init__(self, schema_json, schema_id):
        self.schema = avro.schema.parse(schema_json)
        self.writer = Writer(self.schema)
        self.schema_id = schema_id

    def encode(self, datum, schema_id=None, checked=True):
        """The framed encoding of @datum; @checked False skips check() (for data we made)."""
        buf = io.BytesIO()
        sid = self.schema_id if schema_id is None else schema_id
        buf.write(b"\x00" + int(sid).to_bytes(4, "big"))
        self.writer.write(datum, Encoder(buf), checked)
        return buf.getvalue()


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def key_text(v, what):
    if v is None:
        return None
    if isinstance(v, bool):
        return b"true" if v else b"false"
    if isinstance(v, (int, decimal.Decimal)):
        return str(v).encode()
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, bytes):
        return v
    raise EncodeError(f"{what}: {v!r} cannot be a text key")


def hexs(b):
    return "-" if b is None else b.hex()


def cmd_encode(argv):
    p = argparse.ArgumentParser(prog="avro_encode.py encode")
    p.add_argument("--schema-file", required=True)
    p.add_argument("--schema-id", type=int, required=True)
    p.add_argument("--records")
    p.add_argument("--output")
    p.add_argument("--key-field")
    p.add_argument("--key-schema-file")
    p.add_argument("--key-schema-id", type=int)
    p.add_argument("--key-record-field")
    a = p.parse_args(argv)
    if a.key_field and a.key_schema_file:
        p.error("--key-field and --key-schema-file exclude each other")
    if (a.key_schema_file is None) != (a.key_schema_id is None):
        p.error("--key-schema-file and --key-schema-id go together")
    if a.key_record_field and not a.key_schema_file:
        p.error("--key-record-field needs --key-schema-file")
    value_codec = Codec(read_text(a.schema_file), a.schema_id)
    key_codec = Codec(read_text(a.key_schema_file), a.key_schema_id) if a.key_schema_file else None
    if key_codec and not a.key_record_field and key_codec.schema.type != "record":
        p.error("a key schema that is no record needs --key-record-field")

    def derive_key(value, n):
        if not isinstance(value, dict) or isinstance(value, Branch):
            if a.key_field or key_codec:
                raise EncodeError(f"line {n}: no record to take the key from")
            return None
        if a.key_field:
            if a.key_field not in value:
                raise EncodeError(f"line {n}: no field '{a.key_field}' for the key")
            return key_text(value[a.key_field], f"line {n}: key field '{a.key_field}'")
        if key_codec and a.key_record_field:
            if a.key_record_field not in value:
                raise EncodeError(f"line {n}: no field '{a.key_record_field}' for the key")
            return key_codec.encode(value[a.key_record_field])
        if key_codec:
            return key_codec.encode({f.name: value.get(f.name) for f in key_codec.schema.fields})
        return None

    src = open(a.records, encoding="utf-8") if a.records else sys.stdin
    out = open(a.output, "w", encoding="ascii") if a.output else sys.stdout
    n = 0
    try:
        for n, line in enumerate(src, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise EncodeError(f"line {n}: invalid JSON: {e}")
            env = isinstance(obj, dict) and obj and set(obj) <= ENVELOPE_KEYS
            if not env:
                obj = {"$value": obj}
            given = [k for k in ("$value", "$raw_hex", "$tombstone") if k in obj]
            keys = [k for k in ("$key", "$key_hex", "$key_text", "$no_key") if k in obj]
            if len(given) != 1 or len(keys) > 1:
                raise EncodeError(f"line {n}: an envelope needs one of $value, $raw_hex, $tombstone and at most one key item")
            try:
                datum = None
                if "$value" in obj:
                    datum = from_json(obj["$value"])
                    value = value_codec.encode(datum, obj.get("$schema_id"))
                elif "$raw_hex" in obj:
                    value = bytes.fromhex(obj["$raw_hex"])
                else:
                    value = None
                if "$key" in obj:
                    k = from_json(obj["$key"])
                    key = key_codec.encode(k) if key_codec else key_text(k, f"line {n}: $key")
                elif "$key_hex" in obj:
                    key = bytes.fromhex(obj["$key_hex"])
                elif "$key_text" in obj:
                    key = obj["$key_text"].encode("utf-8")
                elif "$no_key" in obj:
                    key = None
                elif datum is not None:
                    key = derive_key(datum, n)
                elif a.key_field or key_codec:
                    raise EncodeError(f"line {n}: no record to take the key from (give $key, $key_hex, $key_text or $no_key)")
                else:
                    key = None
            except EncodeError as e:
                raise EncodeError(f"line {n}: {e}" if not str(e).startswith("line ") else str(e))
            except (ValueError, TypeError, avro.errors.AvroException) as e:
                raise EncodeError(f"line {n}: {type(e).__name__}: {e}")
            row = f"{hexs(key)}\t{hexs(value)}"
            if "$partition" in obj:
                row += f"\t{int(obj['$partition'])}"
            out.write(row + "\n")
    finally:
        if a.output:
            out.close()
    return 0


# ---- payments ---------------------------------------------------------------------------------

def cmd_payments(argv):
    p = payment_stream.parser("avro_encode.py payments")
    a = p.parse_args(argv)
    codec = Codec(json.dumps(PAYMENT_SCHEMA), a.schema_id)
    return payment_stream.write(p, a, lambda pid, acct, amount, created_ms: codec.encode({
        "payment_id": pid,
        "account": acct,
        "amount": amount,
        "currency": "EUR",
        "created": EPOCH + datetime.timedelta(milliseconds=created_ms),
    }, checked=False))


# ---- decode -----------------------------------------------------------------------------------


def unframe(b, reader, what):
    if len(b) < 5 or b[0] != 0:
        raise EncodeError(f"{what}: not in the Confluent framing ({b[:5].hex()})")
    buf = io.BytesIO(b[5:])
    datum = reader.read(avro.io.BinaryDecoder(buf))
    if buf.tell() != len(b) - 5:
        raise EncodeError(f"{what}: {len(b) - 5 - buf.tell()} byte(s) left after the datum")
    return int.from_bytes(b[1:5], "big"), datum


def cmd_decode(argv):
    p = argparse.ArgumentParser(prog="avro_encode.py decode")
    p.add_argument("--schema-file", required=True)
    p.add_argument("--key-schema-file")
    p.add_argument("--input")
    a = p.parse_args(argv)
    reader = avro.io.DatumReader(avro.schema.parse(read_text(a.schema_file)))
    key_reader = avro.io.DatumReader(avro.schema.parse(read_text(a.key_schema_file))) if a.key_schema_file else None
    src = open(a.input, encoding="ascii") if a.input else sys.stdin
    for n, line in enumerate(src, 1):
        cols = line.rstrip("\n").split("\t")
        if cols == [""]:
            continue
        khex, vhex = (cols[0], cols[1]) if len(cols) >= 2 else ("-", cols[0])
        out = {}
        if khex != "-" and key_reader:
            out["key_schema_id"], out["key"] = unframe(bytes.fromhex(khex), key_reader, f"line {n}: key")
            out["key"] = to_json(out["key"])
        elif khex != "-":
            out["key"] = bytes.fromhex(khex).decode("utf-8", "backslashreplace")
        else:
            out["key"] = None
        if vhex == "-":
            out["schema_id"], out["value"] = None, None
        else:
            out["schema_id"], value = unframe(bytes.fromhex(vhex), reader, f"line {n}: value")
            out["value"] = to_json(value)
        print(json.dumps(out, allow_nan=True))
    return 0


def main():
    cmds = {"encode": cmd_encode, "payments": cmd_payments, "decode": cmd_decode}
    argv = sys.argv[1:]
    if argv and argv[0] == "payments-schema":
        print(json.dumps(PAYMENT_SCHEMA))
        return 0
    if argv and argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0
    cmd = cmds.get(argv[0]) if argv else None
    if cmd is None and argv and argv[0].startswith("-"):
        cmd, argv = cmd_encode, ["encode"] + argv
    if cmd is None:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return cmd(argv[1:])
    except EncodeError as e:
        print(f"avro_encode.py: {e}", file=sys.stderr)
        return 1
    except (OSError, avro.errors.AvroException) as e:
        print(f"avro_encode.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
