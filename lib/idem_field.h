/*
 * idem_field.h - named message fields, business-key templates and their extraction.
 *
 * A field names one piece of a Kafka message: value, key, business_key, topic, partition,
 * offset, timestamp, header:NAME, json:/pointer (RFC 6901, into the value parsed as JSON, or
 * into the document of a Confluent-framed JSON Schema value: struct idem_jsondoc's framed),
 * avro:/pointer (into the value decoded as Confluent-framed Avro, idem_avro.h),
 * avro-key:/pointer (the same, into the Kafka key), protobuf:/pointer and protobuf-key:/pointer
 * (the same for Confluent-framed Protobuf, idem_protobuf.h).
 * A template is a sequence of literal text and fields: "${header:tenant}/${json:/order_no}".
 */
#ifndef IDEM_FIELD_H
#define IDEM_FIELD_H

#include "idem_avro.h"
#include "idem_common.h"
#include "idem_json.h"
#include "idem_protobuf.h"
#include "idem_trace.h"

enum idem_field_kind {
	IDEM_FIELD_LITERAL = 0, /* template text; arg is the text */
	IDEM_FIELD_VALUE,
	IDEM_FIELD_KEY,
	IDEM_FIELD_BUSINESS_KEY,
	IDEM_FIELD_TOPIC,
	IDEM_FIELD_PARTITION,
	IDEM_FIELD_OFFSET,
	IDEM_FIELD_TIMESTAMP,
	IDEM_FIELD_TRACEPARENT, /* the traceparent idemd passes on (idem_field_trace()) */
	IDEM_FIELD_TRACESTATE,  /* the tracestate passed on with it */
	IDEM_FIELD_HEADER,      /* arg is the header name */
	IDEM_FIELD_JSON,        /* arg is the JSON pointer ("" is the whole document) */
	IDEM_FIELD_AVRO,        /* arg is the pointer into the Avro value ("" is the whole datum) */
	IDEM_FIELD_AVRO_KEY,    /* the same, into the Avro key */
	IDEM_FIELD_PROTOBUF,    /* arg is the pointer into the Protobuf value ("" the message) */
	IDEM_FIELD_PROTOBUF_KEY, /* the same, into the Protobuf key */
};

struct idem_field {
	enum idem_field_kind kind;
	char *arg; /* owned; NULL for kinds without an argument */
};

struct idem_template {
	struct idem_field *parts; /* owned */
	size_t n_parts;
};

/*
 * @brief Parse a field name such as "json:/order_no" or "header:tenant" into @ret_field.
 * On failure writes a message (without position) into @errbuf.
 * @returns IDEM_OK, IDEM_ERR_INVALID or IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_field_parse(const char *s, struct idem_field *ret_field,
                                            char *errbuf, size_t errlen);

/*
 * @brief Parse a business-key template. "${...}" embeds a field, "$$" is a literal "$".
 * A string without "${" that is a valid field name ("key", "json:/id") means that field.
 * A template must reference at least one field and may not reference business_key.
 */
IDEM_NODISCARD idem_status idem_template_parse(const char *s, struct idem_template *ret_tpl,
                                               char *errbuf, size_t errlen);

/*
 * @brief The name of a field kind as configurations write it ("value", "header", "json",
 * "avro-key"...): a field with an argument is written NAME:ARG ("header:tenant", "json:/id").
 */
const char *idem_field_kind_str(enum idem_field_kind kind);

void idem_field_done(struct idem_field *f);
void idem_template_done(struct idem_template *t);
/* @brief true if any part needs the value parsed as JSON. */
bool idem_template_needs_json(const struct idem_template *t);
/* @brief true if any part is an avro:, avro-key:, protobuf: or protobuf-key: field. */
bool idem_template_needs_avro(const struct idem_template *t);

/* One Kafka header as seen by extraction. value NULL means a header with a null value. */
struct idem_header {
	const char *name;
	const void *value;
	size_t len;
};

/* A read-only view of one message; nothing here is owned. */
struct idem_msgview {
	const char *consumer; /* the route's consumer (trace context); NULL: not yet known */
	const char *topic;
	int32_t partition;
	int64_t offset;
	int64_t timestamp_ms; /* -1 when the message has none */
	const void *key;      /* NULL: the message has no key */
	size_t key_len;
	const void *value; /* NULL: the message has no value (tombstone) */
	size_t value_len;
	const struct idem_header *headers;
	size_t n_headers;
};

/* A message's trace context as idemd passes it on (ARCHITECTURE.md "Trace context"). */
struct idem_msgtrace {
	bool has;                                   /* false: no valid traceparent */
	char traceparent[IDEM_TRACEPARENT_LEN + 1]; /* its trace, idemd's span as the parent */
	char tracestate[IDEM_TRACESTATE_MAX + 1];   /* "" when it has none to pass on */
};

/*
 * @brief @m's trace context: its traceparent header (exactly one, valid; else none, and the
 * message is otherwise unaffected), continued with idemd's span for @m->consumer and @m's
 * position; its tracestate headers (joined with ',', as HTTP joins repeated fields) if the
 * result is one that may be passed on (idem_tracestate_ok()).
 */
void idem_field_trace(const struct idem_msgview *m, struct idem_msgtrace *ret);

/*
 * How avro: and protobuf: fields, and json: fields of a framed value, find the schema of a
 * schema id: the
 * schema registry in idemd (idem_registry_get()), a table in tests. @type is what the field
 * reads: an id whose schema is of another type is IDEM_SCHEMA_UNKNOWN ("schema id 7 is AVRO,
 * not JSON"). On IDEM_SCHEMA_OK for IDEM_SCHEMA_TYPE_AVRO *ret_schema is a new reference to an
 * idem_avro_schema, for IDEM_SCHEMA_TYPE_PROTOBUF to an idem_pb_schema (a
 * JSON schema hands nothing back: values are not validated against it, and @ret_schema may be
 * NULL); otherwise @why says what happened, and for IDEM_SCHEMA_UNAVAILABLE (transient: the
 * message waits) *ret_retry_ms when to ask again.
 */
enum idem_schema_answer {
	IDEM_SCHEMA_OK = 0,
	IDEM_SCHEMA_UNKNOWN,     /* the id has no schema of @type: the message cannot be read */
	IDEM_SCHEMA_UNAVAILABLE, /* cannot tell now */
	IDEM_SCHEMA_PENDING,     /* being fetched (off the caller's thread): ask again when told */
};
enum idem_schema_type {
	IDEM_SCHEMA_TYPE_AVRO = 0, /* the registry's schemaType AVRO (or none) */
	IDEM_SCHEMA_TYPE_JSON,     /* schemaType JSON: JSON Schema */
	IDEM_SCHEMA_TYPE_PROTOBUF, /* schemaType PROTOBUF */
};
/*
 * @brief The schema type a field reads (AVRO for avro: and avro-key:, PROTOBUF for protobuf:
 * and protobuf-key:) into *ret_type, and in *ret_key whether it reads the Kafka key.
 * @returns false for a field that reads no schema.
 */
bool idem_field_schema(enum idem_field_kind kind, enum idem_schema_type *ret_type, bool *ret_key);
typedef enum idem_schema_answer idem_schema_fn(void *ctx, int32_t id, enum idem_schema_type type,
                                               void **ret_schema, char *why, size_t whylen,
                                               int *ret_retry_ms);

/*
 * The key or the value decoded as Avro or Protobuf (a route reads each as one of them,
 * idem_cfg), at most once per message (struct idem_jsondoc).
 */
struct idem_avrodoc {
	idem_avro_dec *dec; /* owned, created on first use, reused */
	idem_pb_dec *pb;    /* the same for Protobuf */
	bool decoded;
	bool invalid;
	char errmsg[1024];
};

/*
 * What is decoded of one message, at most once per message, for all its fields: the value
 * parsed as JSON by json-c (on the first json: field that idem_json_scalar() does not answer),
 * the header of a framed JSON Schema value, and the value and the key decoded as Avro or
 * Protobuf. Hides json-c, avro-c and libprotobuf. idem_jsondoc_reset() between messages;
 * idem_jsondoc_done() at the end.
 */
struct idem_jsondoc {
	void *root;       /* json_object *, owned */
	void *tok;        /* json_tokener *, owned, reused */
	bool json_c_only; /* never idem_json_scalar(): tests compare the two readers */
	bool parsed;
	/* The value read once by idem_json_members_read() for this message's json: fields. */
	struct idem_json_members members;
	const void *members_of; /* the document it was read from (NULL: not read yet) */
	size_t members_len;
	bool invalid;
	char errmsg[160];

	/*
	 * Set by the owner (routes[].value_format: json-schema): the value is Confluent-framed
	 * JSON Schema, byte 0 = 0, bytes 1-4 the schema id, then the document json: fields read.
	 * Its header is read and its schema's type checked once per message (frame_read); a
	 * value that is not JSON Schema of a known id sets frame_invalid and frame_errmsg.
	 */
	bool framed;
	bool validate; /* ... and its document is checked against that schema (routes[].validate) */
	bool frame_read;
	bool frame_invalid;
	char frame_errmsg[1024];

	struct idem_avrodoc avro[2]; /* [0] the value, [1] the key */
	idem_schema_fn *schema_fn;   /* set by the owner: how avro:, protobuf: and framed json:
	                                fields find schemas */
	void *schema_ctx;
	int retry_ms; /* after IDEM_ERR_UNAVAILABLE: when to try the message again */
	bool pending; /* ... and the schema is being fetched: not a failure (yet) */
};

void idem_jsondoc_init(struct idem_jsondoc *doc);
void idem_jsondoc_reset(struct idem_jsondoc *doc);
void idem_jsondoc_done(struct idem_jsondoc *doc);

/*
 * @brief Build the business key of @m from @tpl into @out (reset first).
 *
 * Keys are stored as text. A key that is not valid UTF-8, contains a NUL byte, or starts with
 * "\x" is stored hex-encoded as "\x" followed by lowercase hex of its bytes, which keeps the
 * mapping one-to-one. Errors (IDEM_ERR_KEY, message in @err) name the field and the problem:
 * missing header, missing or non-scalar JSON value, value not JSON (for doc->framed, not
 * Confluent-framed JSON Schema of an id the registry has as a JSON schema), empty key, key longer
 * than @max_len bytes (after encoding). JSON strings yield their content, numbers and booleans
 * their JSON text; null counts as missing. Avro and Protobuf values have the text idem_avro.h
 * and idem_protobuf.h give them; a value or key that is not Avro (Protobuf) of a schema the
 * registry has is IDEM_ERR_KEY too.
 * IDEM_ERR_UNAVAILABLE when the schema of a framed value cannot be had now
 * (doc->retry_ms: when to try again).
 */
IDEM_NODISCARD idem_status idem_key_build(const struct idem_template *tpl,
                                          const struct idem_msgview *m, struct idem_jsondoc *doc,
                                          size_t max_len, struct idem_buf *out, idem_error *err);

/*
 * @brief Extract field @f of @m as a text handler parameter into @out (reset first).
 *
 * @ret_null is set true when the field is absent (no key, no such header, JSON pointer not
 * found or JSON null, no timestamp) - the parameter is then SQL NULL, not an error.
 * JSON strings yield their content; other JSON values their JSON text. timestamp is rendered as
 * "YYYY-MM-DD HH:MM:SS.mmm+00". business_key is @bkey. Errors: IDEM_ERR_KEY when a json: field
 * is asked of a value that is not JSON (or not framed JSON Schema, for doc->framed), or an
 * avro: (protobuf:) field of one that is not Avro (Protobuf);
 * IDEM_ERR_UNAVAILABLE as for idem_key_build(); IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_field_get(const struct idem_field *f, const struct idem_msgview *m,
                                          struct idem_jsondoc *doc, const char *bkey,
                                          struct idem_buf *out, bool *ret_null, idem_error *err);

#endif
