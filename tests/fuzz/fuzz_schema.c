/*
 * fuzz_schema.c - libFuzzer target: schema text as a registry may serve it, checked against the
 * bounds of idem_limits.h and parsed (idem_pb_scan(), idem_pb_schema_new(),
 * idem_avro_schema_new()).
 *
 * The first byte chooses the format (even: a .proto file, odd: an Avro schema); the rest is the
 * text. Whatever the text, nothing may crash, overflow a stack, leak or hit undefined behaviour,
 * and:
 *   - a schema is built (IDEM_OK) or refused with IDEM_ERR_INVALID and a message;
 *   - a .proto that idem_pb_scan() refuses is refused by idem_pb_schema_new() with the same
 *     message: nothing over a bound reaches libprotoc;
 *   - a .proto built has passed idem_pb_scan().
 * The seeds (corpus/schema) include .proto files and Avro schemas nested just below and just
 * over the bounds, with brackets in comments and strings, and an Avro type defined twice.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idem_avro.h"
#include "idem_protobuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_refusal(idem_status r, const idem_error *err)
{
	if (r != IDEM_OK && (r != IDEM_ERR_INVALID || err->msg[0] == '\0'))
		abort();
}

static void proto(const char *text, size_t len)
{
	idem_pb_schema *s = NULL;
	idem_error scan_err = { 0 }, err = { 0 };
	idem_status scanned, r;

	scanned = idem_pb_scan(text, len, &scan_err);
	check_refusal(scanned, &scan_err);
	r = idem_pb_schema_new("fuzz.proto", text, len, NULL, 0, &s, &err);
	check_refusal(r, &err);
	if (scanned != IDEM_OK && (r != IDEM_ERR_INVALID || strcmp(err.msg, scan_err.msg) != 0))
		abort();
	if ((r == IDEM_OK) != (s != NULL))
		abort();
	idem_pb_schema_unref(s);
}

static void avro(const char *text, size_t len)
{
	idem_avro_schema *s = NULL;
	idem_error err = { 0 };
	idem_status r;

	r = idem_avro_schema_new(text, len, &s, &err);
	check_refusal(r, &err);
	if ((r == IDEM_OK) != (s != NULL))
		abort();
	idem_avro_schema_unref(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text;

	if (size == 0)
		return 0;
	/* The registry's text is a NUL-terminated string (idem_registry_parse_fn). */
	text = malloc(size);
	if (text == NULL)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	if (data[0] % 2 == 0)
		proto(text, size - 1);
	else
		avro(text, size - 1);
	free(text);
	return 0;
}
