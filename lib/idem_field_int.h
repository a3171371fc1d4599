/*
 * idem_field_int.h - what the two files of idem_field share (internal to them).
 *
 * idem_field is split in two: idem_field.c, the field names, business-key templates, struct
 * idem_jsondoc's life, the one reader of a field (field_read()) with every kind but json:, and
 * the business key; idem_field_json.c, json: fields (the value as a plain JSON document or as
 * Confluent-framed JSON Schema, pointers, text). Included by those files only: not part of
 * libidem's contract (idem_field.h is).
 */
#ifndef IDEM_FIELD_INT_H
#define IDEM_FIELD_INT_H

#include "idem_common.h"
#include "idem_field.h"

/*
 * The json: field @f of @m, for field_read(): appends its text to @out, or sets *ret_absent
 * (the message has no value, the pointer finds nothing, JSON null). Errors: IDEM_ERR_KEY (the
 * value is not JSON, or not JSON Schema a framed route can read; with @scalar, an object, an
 * array or a number json-c cannot keep exactly), IDEM_ERR_UNAVAILABLE (a framed value's schema
 * cannot be had now: doc->retry_ms), IDEM_ERR_INVALID (a framed route without a registry),
 * IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem__field_json_read(const struct idem_field *f,
                                                 const struct idem_msgview *m,
                                                 struct idem_jsondoc *doc, bool scalar,
                                                 struct idem_buf *out, const char **ret_absent,
                                                 idem_error *err);

/*
 * For a framed route that validates (doc->framed, doc->validate): reads the header and the
 * schema of @m's value, and checks the document against it, once per message; IDEM_ERR_KEY when
 * the value is not JSON Schema of a known id or the schema refuses it ("value is not JSON Schema
 * this route can read: schema id 7 refuses the document: at /amount: ..."), IDEM_ERR_UNAVAILABLE
 * as idem__field_json_read(). IDEM_OK at once for any other route.
 */
IDEM_NODISCARD idem_status idem__field_json_validate(struct idem_jsondoc *doc,
                                                     const struct idem_msgview *m, idem_error *err);

/*
 * The Confluent header of @p/@n (magic byte, schema id) and the schema of that id, of @type,
 * through doc->schema_fn: what avro: fields and framed json: fields both start with. IDEM_OK:
 * *ret_body and *ret_len: the bytes past the header and *ret_schema (Avro only, may be NULL for
 * JSON) a new reference; or *ret_invalid with @why filled when the bytes are not a frame or the
 * id has no schema of @type (the message cannot be read). IDEM_ERR_UNAVAILABLE when the schema
 * cannot be had now (doc->retry_ms, doc->pending; @why emptied); IDEM_ERR_INVALID without a
 * registry (@what names what needed one).
 */
IDEM_NODISCARD idem_status idem__field_frame_schema(struct idem_jsondoc *doc, const void *p,
                                                    size_t n, enum idem_schema_type type,
                                                    const char *what, void **ret_schema,
                                                    const void **ret_body, size_t *ret_len,
                                                    int32_t *ret_id, bool *ret_invalid, char *why,
                                                    size_t whylen, idem_error *err);

#endif
