/*
 * idem_avro.h - Avro values in the Confluent wire format: schemas, decoding, fields as text.
 *
 * A Confluent-framed value is byte 0 = 0, bytes 1-4 the schema id (big-endian), then the Avro
 * binary encoding of one datum of that schema. avro-c parses and validates the schema and
 * decodes the datum; this module adds what avro-c does not have: logical types, a bounds and
 * depth check that says where decoding failed (byte offset and field path), RFC 6901 pointers
 * into the decoded value, and the one text form of each value (ARCHITECTURE.md, "Avro"):
 *
 *   string, uuid          as they are
 *   int, long             decimal
 *   float, double         shortest text that reads back to the same value; NaN, Infinity,
 *                         -Infinity
 *   boolean               true / false
 *   bytes, fixed          Postgres bytea hex: \x0a1b
 *   enum                  its symbol
 *   null                  absent (a NULL parameter, a missing business key)
 *   decimal               exact, with exactly `scale` digits after the point: -123.45 (a
 *                         value with more digits than its precision is an error)
 *   date                  YYYY-MM-DD
 *   timestamp-millis      YYYY-MM-DDTHH:MM:SS.mmmZ (always 3 digits)
 *   timestamp-micros      YYYY-MM-DDTHH:MM:SS.uuuuuuZ (always 6 digits)
 *   record, array, map    JSON text: records in schema field order, map keys sorted bytewise,
 *                         unions as the value of their branch, the scalars above as JSON
 *                         strings except int/long/float/double (JSON numbers; NaN and
 *                         infinities as strings) and boolean/null
 *
 * Other logical types (time-millis, local-timestamp-*, ...) are their underlying type.
 * Thread safety: a schema may be shared by threads once built (read-only, reference counted);
 * a decoder belongs to one thread.
 */
#ifndef IDEM_AVRO_H
#define IDEM_AVRO_H

#include "idem_common.h"

/* Bytes of the Confluent header: magic byte 0 and a 4-byte big-endian schema id. */
#define IDEM_AVRO_HEADER_BYTES 5

/* Values nested deeper than this (records, arrays, maps, unions) do not decode. */
#define IDEM_AVRO_MAX_DEPTH 64

typedef struct idem_avro_schema idem_avro_schema;
typedef struct idem_avro_dec idem_avro_dec;

/*
 * @brief Read the Confluent header of @p[0..@n).
 * @ret_id is the schema id; @ret_body/@ret_len the Avro binary after the header.
 * @returns IDEM_OK, or IDEM_ERR_KEY with the reason in @err: fewer than 5 bytes ("value is 3
 * bytes, shorter than the 5-byte Confluent header"), a magic byte other than 0, a schema id
 * beyond 2^31-1.
 */
IDEM_NODISCARD idem_status idem_avro_frame(const void *p, size_t n, int32_t *ret_id,
                                           const void **ret_body, size_t *ret_len, idem_error *err);

/*
 * @brief Parse the Avro schema @json[0..@len) (the registry's "schema" string).
 * @ret_schema has one reference, the caller's. A logical type annotation that is not valid
 * (decimal without precision, scale > precision, a logical type on the wrong type) is ignored,
 * as the Avro specification says: the value is its underlying type.
 * Errors: IDEM_ERR_INVALID with avro-c's reason, or what idemd cannot decode (a fixed of 0 or
 * more than 16 MiB, a decimal precision beyond 1000, two fields of a record with one name), in
 * @err; IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_avro_schema_new(const char *json, size_t len,
                                                idem_avro_schema **ret_schema, idem_error *err);
idem_avro_schema *idem_avro_schema_ref(idem_avro_schema *s);
void idem_avro_schema_unref(idem_avro_schema *s); /* accepts NULL */

/*
 * @returns a decoder (NULL on out of memory). Keeps what it needs per schema for reuse, for the
 * 8 schemas it decoded last, with a reference to each (released by idem_avro_dec_free()).
 */
idem_avro_dec *idem_avro_dec_new(void);
void idem_avro_dec_free(idem_avro_dec *dec);

/*
 * @brief Decode @body[0..@len) (the bytes after the header) as one datum of @schema into
 * @dec, replacing what it held. @id is the schema id and @at the offset of @body in the whole
 * Kafka value (5): both are only for messages. Takes its own reference to @schema.
 * Errors (IDEM_ERR_KEY, in @err): where decoding failed, e.g. "schema id 7: at byte 19
 * (/items/2/sku): string length 1000 runs past the end of the value (24 bytes)", "nested deeper
 * than 64 levels", "4 bytes left after the datum", an enum or union index out of range.
 * IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_avro_decode(idem_avro_dec *dec, const idem_avro_schema *schema,
                                            int32_t id, size_t at, const void *body, size_t len,
                                            idem_error *err);

/* @brief Forget the decoded datum (and the schema reference it holds). */
void idem_avro_dec_reset(idem_avro_dec *dec);

/*
 * @brief Append the value at RFC 6901 pointer @ptr in the decoded datum to @out, as text (the
 * table above). "" is the whole datum. Record fields by name, array elements by index, map
 * values by key; unions pass to their branch.
 * When the pointer names nothing, or the value is null, *ret_absent says why ("not found in
 * value", "is null") and nothing is appended. With @scalar (business keys), a record, array or
 * map is an IDEM_ERR_KEY error ("is a record, not a scalar"). Messages do not name the field:
 * the caller does (avro: or avro-key:). Only after a successful idem_avro_decode().
 */
IDEM_NODISCARD idem_status idem_avro_read(const idem_avro_dec *dec, const char *ptr, bool scalar,
                                          struct idem_buf *out, const char **ret_absent,
                                          idem_error *err);

#endif
