/*
 * fuzz_json.c - libFuzzer target: json: fields read by idem_json_scalar() (the fast reader)
 * give exactly what json-c alone gives.
 *
 * The input is "pointer \x1e value", or just a value (then only the fixed pointers below are
 * tried). For each pointer, idem_field_get() and idem_key_build() run twice on the same
 * message: with a document that may use the fast reader and with one that uses json-c only.
 * Status, NULL-ness, the bytes produced and the error message must be identical (abort when
 * not). The fast reader answering at all is also checked against json-c on its own: whatever
 * it vouches for, json-c must accept and read to the same bytes; and the value read once for all
 * fields (idem_json_members_read()) must answer as a pass of its own does.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_field.h"
#include "idem_json.h"

#define FUZZ_SEP 0x1e

static struct idem_json_members members;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct outcome {
	idem_status r;
	bool null;
	struct idem_buf out;
	char msg[sizeof(((idem_error *)0)->msg)];
};

/* A parameter (@f) or a business key (@t, when not NULL) of @m, through one reader or both. */
static void run(const struct idem_field *f, const struct idem_template *t,
                const struct idem_msgview *m, bool json_c_only, struct outcome *o)
{
	struct idem_jsondoc doc;
	idem_error err;

	idem_jsondoc_init(&doc);
	doc.json_c_only = json_c_only;
	memset(&err, 0, sizeof(err));
	o->null = false;
	o->r = t != NULL ? idem_key_build(t, m, &doc, 512, &o->out, &err)
	                 : idem_field_get(f, m, &doc, NULL, &o->out, &o->null, &err);
	snprintf(o->msg, sizeof(o->msg), "%s", o->r == IDEM_OK ? "" : err.msg);
	idem_jsondoc_done(&doc);
}

static void same(const struct outcome *a, const struct outcome *b)
{
	if (a->r != b->r || strcmp(a->msg, b->msg) != 0)
		abort();
	if (a->r != IDEM_OK)
		return;
	if (a->null != b->null || a->out.len != b->out.len ||
	    (a->out.len > 0 && memcmp(a->out.data, b->out.data, a->out.len) != 0))
		abort();
}

static void try_pointer(const char *ptr, const struct idem_msgview *m)
{
	struct idem_field f;
	struct idem_template t;
	struct outcome fast = { 0 }, slow = { 0 };
	char name[600];
	const char *p;
	size_t n;

	snprintf(name, sizeof(name), "json:%s", ptr);
	if (idem_field_parse(name, &f, NULL, 0) != IDEM_OK)
		return;
	run(&f, NULL, m, false, &fast);
	run(&f, NULL, m, true, &slow);
	same(&fast, &slow);
	/* What the fast reader vouches for, json-c reads the same (as a parameter). */
	if (idem_json_scalar(m->value, m->value_len, f.arg, &p, &n) &&
	    (slow.r != IDEM_OK || slow.null || slow.out.len != n ||
	     memcmp(slow.out.data, p, n) != 0))
		abort();
	/* The value read once for all fields answers as a pass of its own would. */
	if (m->value != NULL) {
		bool alone = idem_json_scalar(m->value, m->value_len, f.arg, &p, &n);
		const char *q = NULL;
		size_t qn = 0;
		int r;

		(void)idem_json_members_read(m->value, m->value_len, &members);
		r = idem_json_members_scalar(&members, f.arg, &q, &qn);
		if (r >= 0 && ((r == 1) != alone || (alone && (q != p || qn != n))))
			abort();
	}
	idem_field_done(&f);
	if (idem_template_parse(name, &t, NULL, 0) == IDEM_OK) {
		run(NULL, &t, m, false, &fast);
		run(NULL, &t, m, true, &slow);
		same(&fast, &slow);
		idem_template_done(&t);
	}
	idem_buf_done(&fast.out);
	idem_buf_done(&slow.out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const pointers[] = {
		"", "/id", "/a", "/a/b", "/a/0", "/0", "/a~1b", "/m~0n", "/", "/a/1/c",
	};
	struct idem_msgview m = { 0 };
	const uint8_t *sep = memchr(data, FUZZ_SEP, size);
	char *value, *ptr = NULL;
	size_t vlen = size;

	value = malloc(size + 1);
	if (value == NULL)
		return 0;
	if (sep != NULL && sep - data < 500 && memchr(data, '\0', (size_t)(sep - data)) == NULL) {
		size_t plen = (size_t)(sep - data);

		ptr = malloc(plen + 1);
		if (ptr == NULL) {
			free(value);
			return 0;
		}
		memcpy(ptr, data, plen);
		ptr[plen] = '\0';
		vlen = size - plen - 1;
		memcpy(value, sep + 1, vlen);
	} else {
		memcpy(value, data, size);
	}
	value[vlen] = '\0';
	m.topic = "t";
	m.value = value;
	m.value_len = vlen;
	m.timestamp_ms = -1;
	for (size_t i = 0; i < sizeof(pointers) / sizeof(pointers[0]); i++)
		try_pointer(pointers[i], &m);
	if (ptr != NULL)
		try_pointer(ptr, &m);
	free(ptr);
	free(value);
	return 0;
}
