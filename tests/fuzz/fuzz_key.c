/*
 * fuzz_key.c - libFuzzer target for business-key templates and field extraction.
 *
 * The input is split on the byte 0x1e (ASCII record separator) into at most five parts:
 *
 *   template \x1e key \x1e header-name \x1e header-value \x1e value
 *
 * A missing part is absent in the message: no key, no header, a header with a null value, or
 * no value (a tombstone). The value is the rest of the input and may itself contain 0x1e.
 * The template text is parsed as a template and as a field name; parse failures are fine.
 * Invariants of a built key (non-empty, within the limit, valid UTF-8 or well-formed hex) are
 * checked and abort when broken. One input in four reads its value as Confluent-framed JSON
 * Schema (routes[].value_format: json-schema), with schemas from fuzz_schema().
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_field.h"

#define FUZZ_SEP   0x1e
#define FUZZ_PARTS 5

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Schema ids for framed values: a JSON schema, unknown, an Avro schema or not available now. */
static enum idem_schema_answer fuzz_schema(void *ctx, int32_t id, enum idem_schema_type type,
                                           void **ret_schema, char *why, size_t whylen,
                                           int *ret_retry_ms)
{
	(void)ctx;
	(void)ret_schema;
	if (id % 4 == 0 && type == IDEM_SCHEMA_TYPE_JSON)
		return IDEM_SCHEMA_OK;
	if (id % 4 == 3) {
		*ret_retry_ms = 100;
		snprintf(why, whylen, "schema id %d: cannot reach the registry", (int)id);
		return IDEM_SCHEMA_UNAVAILABLE;
	}
	snprintf(why, whylen, "schema id %d is not a JSON schema", (int)id);
	return IDEM_SCHEMA_UNKNOWN;
}

static void check_key(const struct idem_buf *out, size_t max_len)
{
	if (out->len == 0 || out->len > max_len || out->data == NULL)
		abort();
	if (strlen(out->data) != out->len || !idem_utf8_valid(out->data, out->len))
		abort();
	if (out->len >= 2 && out->data[0] == '\\' && out->data[1] == 'x') {
		if (out->len % 2 != 0)
			abort();
		for (size_t i = 2; i < out->len; i++) {
			if (strchr("0123456789abcdef", out->data[i]) == NULL)
				abort();
		}
	}
}

static void get_field(const char *name, const struct idem_msgview *m, struct idem_jsondoc *doc,
                      const char *bkey, struct idem_buf *out)
{
	struct idem_field f;
	idem_error err;
	bool null = false;

	if (idem_field_parse(name, &f, NULL, 0) != IDEM_OK)
		return;
	if (idem_field_get(&f, m, doc, bkey, out, &null, &err) == IDEM_OK && !null &&
	    out->data == NULL)
		abort();
	idem_field_done(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const fields[] = {
		"value",        "key",   "topic",   "partition", "offset",         "timestamp",
		"business_key", "json:", "json:/a", "json:/0",   "json:/a/0/b~1c", "json:/~0/",
	};
	const uint8_t *part[FUZZ_PARTS] = { NULL };
	size_t len[FUZZ_PARTS] = { 0 };
	size_t n = 0, start = 0;
	struct idem_header hdrs[2];
	struct idem_msgview m = { 0 };
	struct idem_template tpl;
	struct idem_jsondoc doc;
	struct idem_buf out = { 0 }, param = { 0 };
	idem_error err;
	char errbuf[256];
	char *tpl_text, *hdr_name;
	bool have_key = false;
	size_t max_len = size % 3 == 0 ? size % 40 : 512;

	for (size_t i = 0; i <= size && n < FUZZ_PARTS; i++) {
		if (i == size || (data[i] == FUZZ_SEP && n < FUZZ_PARTS - 1)) {
			part[n] = data + start;
			len[n] = i - start;
			n++;
			start = i + 1;
		}
	}
	if (n == FUZZ_PARTS)
		len[FUZZ_PARTS - 1] = size - (size_t)(part[FUZZ_PARTS - 1] - data);

	tpl_text = strndup((const char *)part[0], len[0]);
	hdr_name = strndup(n > 2 ? (const char *)part[2] : "h", n > 2 ? len[2] : 1);
	if (tpl_text == NULL || hdr_name == NULL)
		goto out_free_text;

	m.topic = "fuzz";
	m.partition = (int32_t)(size % 7) - 1;
	m.offset = (int64_t)size * 7919;
	m.timestamp_ms = size % 5 == 0 ? -1 : (int64_t)size * 1000003;
	if (n > 1) {
		m.key = part[1];
		m.key_len = len[1];
		have_key = true;
	}
	/* A duplicate header first: the later one must win. */
	hdrs[0].name = hdr_name;
	hdrs[0].value = "shadowed";
	hdrs[0].len = 8;
	hdrs[1].name = hdr_name;
	hdrs[1].value = n > 3 ? part[3] : NULL;
	hdrs[1].len = n > 3 ? len[3] : 0;
	if (n > 2) {
		m.headers = hdrs;
		m.n_headers = 2;
	}
	if (n > 4) {
		m.value = part[4];
		m.value_len = len[4];
	}

	idem_jsondoc_init(&doc);
	doc.framed = size % 4 == 1;
	doc.schema_fn = fuzz_schema;
	if (idem_template_parse(tpl_text, &tpl, errbuf, sizeof(errbuf)) == IDEM_OK) {
		if (idem_key_build(&tpl, &m, &doc, max_len, &out, &err) == IDEM_OK)
			check_key(&out, max_len);
		(void)idem_template_needs_json(&tpl);
		idem_template_done(&tpl);
	}
	get_field(tpl_text, &m, &doc, out.len > 0 ? out.data : NULL, &param);
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		get_field(fields[i], &m, &doc, have_key ? "bkey" : NULL, &param);
	/* The same message again after a reset must parse the same way. */
	idem_jsondoc_reset(&doc);
	get_field("json:/a", &m, &doc, NULL, &param);
	idem_jsondoc_done(&doc);
	idem_buf_done(&param);
	idem_buf_done(&out);
out_free_text:
	free(hdr_name);
	free(tpl_text);
	return 0;
}
