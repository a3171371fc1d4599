/*
 * idem_protobuf.h - Protobuf values in the Confluent wire format: schemas, decoding, fields as
 * text (ARCHITECTURE.md, "Protobuf").
 *
 * A Confluent-framed Protobuf value is byte 0 = 0, bytes 1-4 the schema id (big-endian), then
 * the message indexes (zigzag varints: their count, then the path from the file's top level to
 * the message type; a single 0 byte is the first message of the file), then the message in the
 * Protobuf binary encoding. Schemas are the registry's .proto text, parsed by libprotoc and
 * built into a descriptor pool of their own over the well-known types libprotobuf carries;
 * imports come from the schema's references (struct idem_pb_file). Values are decoded as
 * dynamic messages after a bounds walk that says where bytes fail. libprotobuf's own log is
 * silenced (a log handler that drops it, installed once by the first schema or decoder): it
 * reports through idem_error here. The one text form of each value:
 *
 *   string                      as it is
 *   int32/64, uint32/64,
 *   sint*, fixed*, sfixed*      decimal
 *   float, double               shortest text that reads back to the same value; NaN,
 *                               Infinity, -Infinity (as Avro's)
 *   bool                        true / false
 *   bytes                       Postgres bytea hex: \x0a1b
 *   enum                        its name; a number the enum does not name as its number
 *   google.protobuf.Timestamp   RFC 3339 UTC, 0, 3, 6 or 9 digits of fraction:
 *                               2026-12-03T10:00:20.021Z (the proto3 JSON mapping's text)
 *   google.protobuf.Duration    seconds with 0, 3, 6 or 9 digits of fraction: 1.000340012s
 *   wrapper types               their value, as above
 *   google.protobuf.Value       its kind's value: a number as double, a string as it is,
 *                               true / false; null is absent ("is null"); a struct or a list
 *                               as JSON; no kind (not valid) is absent ("is not set"), left
 *                               out of libprotobuf's JSON, null in JSON written here
 *   message, Struct, ListValue,
 *   map, repeated field         JSON text by the proto3 JSON mapping (libprotobuf's
 *                               util::BinaryToJsonString for messages): fields by their .proto
 *                               names, unset scalars with their defaults (proto2's too), unset
 *                               messages and oneof members left out, map entries by key
 *                               (strings bytewise, numbers by value, false first) whatever the
 *                               writer's order. As the mapping writes them, unlike the text
 *                               above: 64-bit integers as JSON strings ("5"), bytes in base64
 *                               ("AQI="), an enum as its name string (a number not named as a
 *                               JSON number), NaN and the infinities as strings, Timestamp,
 *                               Duration and wrappers as their JSON form. A repeated field or a
 *                               map read alone is written element by element the same way,
 *                               messages by libprotobuf, scalars here (reals in the shortest
 *                               form above, which libprotobuf's may not be: 5e-324).
 *
 * A Timestamp outside 0001-01-01 .. 9999-12-31, a Duration beyond 10000 years or whose nanos
 * are out of range or of the other sign than its seconds, a proto2 string that is not UTF-8 in
 * JSON, or a message libprotobuf cannot write as JSON (an Any of a type the schema does not
 * know) is an IDEM_ERR_KEY error of the read, not of the decode.
 *
 * Presence: a proto3 scalar that is not set has its default value (0, "", false, the enum's
 * first value); a field that has presence (a message, an optional field, a oneof member, a
 * proto2 field, a wrapper) and is not set is absent (a NULL parameter, a missing business key):
 * "is not set". A missing proto2 required field is absent too, not a decoding error; a number a
 * proto2 (closed) enum does not name leaves the field unset, as libprotobuf reads it.
 *
 * Thread safety: a schema may be shared by threads once built (read-only, reference counted);
 * a decoder belongs to one thread.
 */
#ifndef IDEM_PROTOBUF_H
#define IDEM_PROTOBUF_H

#ifdef __cplusplus
extern "C" {
#endif

#include "idem_common.h"

/* Messages nested deeper than this do not decode; a message-index path longer than it neither. */
#define IDEM_PB_MAX_DEPTH 64

typedef struct idem_pb_schema idem_pb_schema;
typedef struct idem_pb_dec idem_pb_dec;

/* One .proto file a schema imports: its import name ("common/money.proto") and its text. */
struct idem_pb_file {
	const char *name;
	const char *text; /* NUL-terminated at len */
	size_t len;
};

/*
 * @brief Parse the .proto text @text[0..@len) (the registry's "schema" string, NUL-terminated at
 * @len), named @name (only for messages and imports of it), with the files it imports, directly
 * or not, in @deps (any order; only those imported are read). A file libprotobuf carries
 * (google/protobuf/timestamp.proto and the other well-known types, descriptor.proto) comes from
 * libprotobuf, even when @deps has one of that name. Files that import each other are an error,
 * and so is a file of package google.protobuf (its types would be taken for libprotobuf's).
 * @ret_schema has one reference, the caller's.
 * The text of each file is checked by idem_pb_scan() before libprotoc parses it.
 * Errors: IDEM_ERR_INVALID with where and why in @err ("line 3:7: Expected \";\".", "import
 * \"money.proto\": line 2:9: ...", "import \"money.proto\" was not found (imported by
 * \"order.proto\")", "import cycle: \"a.proto\" -> \"b.proto\" -> \"a.proto\"", "order.proto:
 * shop.Order.total: \"Money\" is not defined.", "file defines no message" for the main file);
 * IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_pb_schema_new(const char *name, const char *text, size_t len,
                                              const struct idem_pb_file *deps, size_t n_deps,
                                              idem_pb_schema **ret_schema, idem_error *err);
idem_pb_schema *idem_pb_schema_ref(idem_pb_schema *s);
void idem_pb_schema_unref(idem_pb_schema *s); /* accepts NULL */

/*
 * @brief Check the .proto text @text[0..@len) against the bounds of idem_limits.h, reading it as
 * libprotoc's tokenizer does (comments and string literals skipped) without recursing, before
 * libprotoc parses it: brackets ({, <, [, () nested deeper than IDEM_SCHEMA_MAX_DEPTH, more
 * than IDEM_SCHEMA_MAX_DEFINITIONS definitions (message, enum, group, oneof, service, extend)
 * or more than IDEM_SCHEMA_MAX_IMPORTS imports. idem_pb_schema_new() calls it for the file and
 * each of its imports; nothing else of the text is checked (libprotoc does that).
 * Errors: IDEM_ERR_INVALID, naming the place, the bound and its value ("line 65:3: nested
 * deeper than the bound of 64 levels").
 */
IDEM_NODISCARD idem_status idem_pb_scan(const char *text, size_t len, idem_error *err);

/* @returns a decoder (NULL on out of memory). */
idem_pb_dec *idem_pb_dec_new(void);
void idem_pb_dec_free(idem_pb_dec *dec); /* accepts NULL */

/*
 * @brief Decode @body[0..@len) (the bytes after the 5-byte Confluent header: the message indexes,
 * then the message) with @schema into @dec, replacing what it held. @id is the schema id and
 * @at the offset of @body in the whole Kafka value (5): both only for messages. Takes its own
 * reference to @schema.
 * Errors (IDEM_ERR_KEY, in @err, saying where): a message-index path that is malformed, longer
 * than IDEM_PB_MAX_DEPTH or names no message ("schema id 7: message indexes [3] name no
 * message: the file has 2"), a varint over 10 bytes, a tag over 32 bits, field number 0, a
 * length past the end (of the value or of the message it is in), a group wire type, an end
 * group without its start, wire types 6 and 7, a wire type that is not the field's (packed and
 * unpacked repeated scalars are both the field's), packed fixed-size elements that do not fill
 * their length, invalid UTF-8 in a proto3 string (proto2 strings are not checked, as libprotobuf
 * does not), nesting deeper than IDEM_PB_MAX_DEPTH levels of messages (map entries count)
 * ("schema id 7: at byte 19 (/items/2/sku): length 1000 runs past the end of the value (24
 * bytes)": the byte in the whole Kafka value, the path by .proto names, repeated fields' index
 * and map entries' key). Fields the schema does not know are skipped, their bytes checked.
 * IDEM_ERR_NOMEM. Keeps one message per message type of the last schema, reused.
 */
IDEM_NODISCARD idem_status idem_pb_decode(idem_pb_dec *dec, const idem_pb_schema *schema,
                                          int32_t id, size_t at, const void *body, size_t len,
                                          idem_error *err);

/* @brief Forget the decoded message (and the schema reference it holds); the messages kept for
 * reuse stay, with their own reference to their schema, until another schema or _free(). */
void idem_pb_dec_reset(idem_pb_dec *dec);

/*
 * @brief Append the value at RFC 6901 pointer @ptr in the decoded message to @out, as text (the
 * table above). "" is the whole message. Fields by their .proto names, repeated fields by index,
 * map values by key (the key's text as above: a string key as it is, an integer key in decimal,
 * a bool key true or false); Struct by key and ListValue by index (their JSON form), Value
 * passing to its struct or list. Indexes are "0" or digits without a leading zero (RFC 6901).
 * On IDEM_OK, *ret_absent is NULL, or says why nothing was appended: the pointer names nothing
 * ("not found in value": an unknown name or key, an index out of range), the field is absent
 * (see Presence: "is not set") or a Value is null ("is null"). With @scalar (business keys), a
 * message (other than the well-known scalar types above), a Struct or ListValue, a repeated
 * field or a map is an IDEM_ERR_KEY error ("is a message, not a scalar", "is a repeated field,
 * not a scalar", "is a map, not a scalar"). Nothing is appended on an error. A pointer that is
 * not one, or no decoded message: IDEM_ERR_INVALID. Messages do not name the field: the caller
 * does (protobuf: or protobuf-key:). Only after a successful idem_pb_decode().
 */
IDEM_NODISCARD idem_status idem_pb_read(const idem_pb_dec *dec, const char *ptr, bool scalar,
                                        struct idem_buf *out, const char **ret_absent,
                                        idem_error *err);

#ifdef __cplusplus
}
#endif

#endif
