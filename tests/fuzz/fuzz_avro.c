/*
 * fuzz_avro.c - libFuzzer target: Avro datums decoded and read as text (idem_avro.h).
 *
 * The input is the body of a Confluent-framed value (the bytes after a valid header), decoded
 * with one fixed schema that has every type and logical type, a recursive union (a record
 * holding itself, first so that nesting is cheap to reach), arrays and maps. When it decodes,
 * a set of pointers is read as parameters and as business keys, and the whole datum as JSON.
 * Whatever the bytes, nothing may crash, leak or hit undefined behaviour, and:
 *   - decoding fails only with IDEM_ERR_KEY and a message naming the schema id;
 *   - a read answers IDEM_OK (text, or absent with nothing appended) or IDEM_ERR_KEY;
 *   - the whole datum is a JSON object json-c reads, unless a string in it is not UTF-8 or
 *     a decimal in it has more digits than its precision.
 * The decoder is kept across inputs, as the daemon keeps it across messages.
 */
#include <json-c/json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idem_avro.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char schema_json[] =
        "{\"type\":\"record\",\"name\":\"F\",\"namespace\":\"fz\",\"fields\":["
        "{\"name\":\"next\",\"type\":[\"null\",\"F\"]},"
        "{\"name\":\"s\",\"type\":\"string\"},"
        "{\"name\":\"u\",\"type\":{\"type\":\"string\",\"logicalType\":\"uuid\"}},"
        "{\"name\":\"i\",\"type\":\"int\"},"
        "{\"name\":\"l\",\"type\":\"long\"},"
        "{\"name\":\"f\",\"type\":\"float\"},"
        "{\"name\":\"d\",\"type\":\"double\"},"
        "{\"name\":\"b\",\"type\":\"boolean\"},"
        "{\"name\":\"y\",\"type\":\"bytes\"},"
        "{\"name\":\"x\",\"type\":{\"type\":\"fixed\",\"name\":\"X\",\"size\":4}},"
        "{\"name\":\"e\",\"type\":{\"type\":\"enum\",\"name\":\"E\",\"symbols\":[\"A\",\"B\",\"C\"]}},"
        "{\"name\":\"n\",\"type\":\"null\"},"
        "{\"name\":\"dec\",\"type\":{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":40,\"scale\":3}},"
        "{\"name\":\"decf\",\"type\":{\"type\":\"fixed\",\"name\":\"D\",\"size\":8,\"logicalType\":\"decimal\",\"precision\":18,\"scale\":2}},"
        "{\"name\":\"dt\",\"type\":{\"type\":\"int\",\"logicalType\":\"date\"}},"
        "{\"name\":\"tm\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
        "{\"name\":\"tu\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-micros\"}},"
        "{\"name\":\"opt\",\"type\":[\"null\",\"string\",\"long\",\"F\"]},"
        "{\"name\":\"arr\",\"type\":{\"type\":\"array\",\"items\":[\"null\",\"double\",\"F\"]}},"
        "{\"name\":\"m\",\"type\":{\"type\":\"map\",\"values\":{\"type\":\"array\",\"items\":\"string\"}}}"
        "]}";

static const char *const pointers[] = {
	"",       "/next",  "/next/next/s", "/next/m", "/s",      "/u",       "/i",
	"/l",     "/f",     "/d",           "/b",      "/y",      "/x",       "/e",
	"/n",     "/dec",   "/decf",        "/dt",     "/tm",     "/tu",      "/opt",
	"/opt/s", "/opt/e", "/arr",         "/arr/0",  "/arr/1",  "/arr/1/s", "/arr/01",
	"/m",     "/m/a",   "/m/a/0",       "/m/",     "/m/~0~1", "/nope",    "/s/0",
};

static void read_one(const idem_avro_dec *dec, const char *ptr, bool scalar, struct idem_buf *out)
{
	const char *absent = NULL;
	idem_error err;
	idem_status r;

	idem_buf_reset(out);
	r = idem_avro_read(dec, ptr, scalar, out, &absent, &err);
	if (r != IDEM_OK && r != IDEM_ERR_KEY)
		abort();
	if (r == IDEM_ERR_KEY && err.msg[0] == '\0')
		abort();
	if (r == IDEM_OK && absent != NULL && out->len != 0)
		abort();
	if (r != IDEM_OK && out->len != 0)
		abort();
	if (out->len > 0 && out->data[out->len] != '\0')
		abort();
}

/* The whole datum as JSON: an object json-c reads to the end. */
static void check_json(const idem_avro_dec *dec, struct idem_buf *out)
{
	const char *absent = NULL;
	json_tokener *tok;
	json_object *obj;
	idem_error err;
	idem_status r;

	idem_buf_reset(out);
	r = idem_avro_read(dec, "", false, out, &absent, &err);
	if (r == IDEM_ERR_KEY && (strstr(err.msg, "not valid UTF-8") != NULL ||
	                          strstr(err.msg, "more digits than its precision") != NULL))
		return;
	if (r != IDEM_OK || absent != NULL)
		abort();
	tok = json_tokener_new_ex(1000);
	if (tok == NULL)
		abort();
	obj = json_tokener_parse_ex(tok, out->data, (int)out->len);
	if (obj == NULL || !json_object_is_type(obj, json_type_object) ||
	    json_tokener_get_error(tok) != json_tokener_success ||
	    (size_t)json_tokener_get_parse_end(tok) != out->len)
		abort();
	json_object_put(obj);
	json_tokener_free(tok);
}

static idem_avro_schema *schema;
static idem_avro_dec *dec;

/* Freed at exit, so that LeakSanitizer's check at exit sees only what a run leaked. */
static void done(void)
{
	idem_avro_dec_free(dec);
	idem_avro_schema_unref(schema);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	idem_error err;

	(void)argc;
	(void)argv;
	if (idem_avro_schema_new(schema_json, sizeof(schema_json) - 1, &schema, &err) != IDEM_OK ||
	    (dec = idem_avro_dec_new()) == NULL || atexit(done) != 0)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idem_buf out = { 0 };
	idem_error err;
	idem_status r;

	r = idem_avro_decode(dec, schema, 42, IDEM_AVRO_HEADER_BYTES, data, size, &err);
	if (r != IDEM_OK) {
		if (r != IDEM_ERR_KEY || strncmp(err.msg, "schema id 42: at byte ", 22) != 0)
			abort();
		return 0;
	}
	for (size_t i = 0; i < sizeof(pointers) / sizeof(pointers[0]); i++) {
		read_one(dec, pointers[i], false, &out);
		read_one(dec, pointers[i], true, &out);
	}
	check_json(dec, &out);
	idem_buf_done(&out);
	idem_avro_dec_reset(dec);
	return 0;
}
