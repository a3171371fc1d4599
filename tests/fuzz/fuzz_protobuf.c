/*
 * fuzz_protobuf.c - libFuzzer target: Protobuf messages decoded and read as text
 * (idem_protobuf.h).
 *
 * The input is the body of a Confluent-framed value (the bytes after a valid header): message
 * indexes, then a message of one fixed schema that has every kind of field (every scalar type,
 * an enum, a recursive message first so that nesting is cheap to reach, repeated fields packed
 * and not, maps with string, integer and bool keys, a oneof, Timestamp, Duration, Struct,
 * Value, a wrapper, Any, and an imported proto2 message with a closed enum, a group, a required
 * field and an extension). When it decodes, a set of pointers is read as parameters and as
 * business keys. Whatever the bytes, nothing may crash, leak or hit undefined behaviour, and:
 *   - decoding fails only with IDEM_ERR_KEY and a message naming the schema id;
 *   - a read answers IDEM_OK (text, or absent with nothing appended) or IDEM_ERR_KEY with a
 *     message, appending nothing then;
 *   - what is JSON (the whole message, a message, a repeated field, a map) is UTF-8 without NUL.
 * The decoder is kept across inputs, as the daemon keeps it across messages.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idem_protobuf.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char schema_proto[] = "syntax = \"proto3\";\n"
                                   "package fz;\n"
                                   "import \"google/protobuf/any.proto\";\n"
                                   "import \"google/protobuf/duration.proto\";\n"
                                   "import \"google/protobuf/struct.proto\";\n"
                                   "import \"google/protobuf/timestamp.proto\";\n"
                                   "import \"google/protobuf/wrappers.proto\";\n"
                                   "import \"fz/legacy.proto\";\n"
                                   "enum E { E0 = 0; E1 = 1; E2 = 2; }\n"
                                   "message F {\n"
                                   "  F next = 1;\n"
                                   "  string s = 2;\n"
                                   "  int32 i32 = 3;\n"
                                   "  int64 i64 = 4;\n"
                                   "  uint32 u32 = 5;\n"
                                   "  uint64 u64 = 6;\n"
                                   "  sint32 s32 = 7;\n"
                                   "  sint64 s64 = 8;\n"
                                   "  fixed32 f32 = 9;\n"
                                   "  fixed64 f64 = 10;\n"
                                   "  sfixed32 sf32 = 11;\n"
                                   "  sfixed64 sf64 = 12;\n"
                                   "  float fl = 13;\n"
                                   "  double db = 14;\n"
                                   "  bool b = 15;\n"
                                   "  bytes by = 16;\n"
                                   "  E e = 17;\n"
                                   "  optional string opt = 18;\n"
                                   "  repeated int64 packed = 19;\n"
                                   "  repeated sint32 unpacked = 20 [packed = false];\n"
                                   "  repeated double reals = 21;\n"
                                   "  repeated string strs = 22;\n"
                                   "  repeated F kids = 23;\n"
                                   "  map<string, F> m = 24;\n"
                                   "  map<int64, string> mi = 25;\n"
                                   "  map<bool, E> mb = 26;\n"
                                   "  oneof o {\n"
                                   "    string os = 27;\n"
                                   "    F of = 28;\n"
                                   "  }\n"
                                   "  google.protobuf.Timestamp ts = 29;\n"
                                   "  google.protobuf.Duration du = 30;\n"
                                   "  google.protobuf.Struct st = 31;\n"
                                   "  google.protobuf.Value v = 32;\n"
                                   "  google.protobuf.Int64Value w = 33;\n"
                                   "  google.protobuf.Any any = 34;\n"
                                   "  fz.legacy.L leg = 35;\n"
                                   "  repeated google.protobuf.Timestamp tss = 36;\n"
                                   "  repeated bytes bys = 37;\n"
                                   "  repeated E es = 38;\n"
                                   "}\n"
                                   "message G {\n"
                                   "  message H { string y = 1; }\n"
                                   "  int32 x = 1;\n"
                                   "}\n";

static const char legacy_proto[] = "syntax = \"proto2\";\n"
                                   "package fz.legacy;\n"
                                   "message L {\n"
                                   "  enum K { K0 = 0; K1 = 1; }\n"
                                   "  optional string s = 1;\n"
                                   "  optional K k = 2;\n"
                                   "  repeated int32 r = 3;\n"
                                   "  required int32 q = 4;\n"
                                   "  optional group Grp = 5 { optional int32 a = 1; }\n"
                                   "  map<string, string> sm = 6;\n"
                                   "  extensions 100 to 199;\n"
                                   "}\n"
                                   "extend L { optional string ext = 100; }\n";

static const char *const pointers[] = {
	"",          "/next",     "/next/next/s", "/next/m",  "/s",       "/i32",     "/i64",
	"/u32",      "/u64",      "/s32",         "/s64",     "/f32",     "/f64",     "/sf32",
	"/sf64",     "/fl",       "/db",          "/b",       "/by",      "/e",       "/opt",
	"/packed",   "/packed/0", "/unpacked/1",  "/reals",   "/reals/0", "/strs",    "/strs/0",
	"/kids",     "/kids/0",   "/kids/0/s",    "/kids/01", "/m",       "/m/a",     "/m/a/s",
	"/m/",       "/m/~0~1",   "/mi",          "/mi/1",    "/mi/-1",   "/mb",      "/mb/true",
	"/os",       "/of",       "/of/s",        "/ts",      "/du",      "/st",      "/st/a",
	"/st/a/0",   "/st/a/b",   "/v",           "/v/0",     "/v/a",     "/w",       "/any",
	"/leg",      "/leg/s",    "/leg/k",       "/leg/r",   "/leg/q",   "/leg/grp", "/leg/sm",
	"/leg/sm/a", "/tss",      "/tss/0",       "/bys",     "/bys/0",   "/es",      "/es/0",
	"/x",        "/y",        "/nope",        "/s/0",     "/i32/x",
};

/* Whether @ptr names what is written as JSON when it is there: "" or a field of F. */
static bool is_json(const char *ptr)
{
	static const char *const json[] = { "",      "/next",  "/packed", "/reals", "/strs",
		                            "/kids", "/m",     "/mi",     "/mb",    "/of",
		                            "/st",   "/any",   "/leg",    "/tss",   "/bys",
		                            "/es",   "/leg/r", "/leg/sm", "/kids/0" };

	for (size_t i = 0; i < sizeof(json) / sizeof(json[0]); i++) {
		if (strcmp(ptr, json[i]) == 0)
			return true;
	}
	return false;
}

static void read_one(const idem_pb_dec *dec, const char *ptr, bool scalar, struct idem_buf *out)
{
	const char *absent = NULL;
	idem_error err;
	idem_status r;

	idem_buf_reset(out);
	err.msg[0] = '\0';
	r = idem_pb_read(dec, ptr, scalar, out, &absent, &err);
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
	if (r == IDEM_OK && absent == NULL && !scalar && is_json(ptr) && out->len > 0 &&
	    !idem_utf8_valid(out->data, out->len))
		abort();
}

static idem_pb_schema *schema;
static idem_pb_dec *dec;

/* Freed at exit, so that LeakSanitizer's check at exit sees only what a run leaked. */
static void done(void)
{
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(schema);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const struct idem_pb_file deps[] = {
		{ "fz/legacy.proto", legacy_proto, sizeof(legacy_proto) - 1 },
	};
	idem_error err;

	(void)argc;
	(void)argv;
	if (idem_pb_schema_new("fz.proto", schema_proto, sizeof(schema_proto) - 1, deps, 1, &schema,
	                       &err) != IDEM_OK ||
	    (dec = idem_pb_dec_new()) == NULL || atexit(done) != 0)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idem_buf out = { 0 };
	idem_error err;
	idem_status r;

	r = idem_pb_decode(dec, schema, 42, 5, data, size, &err);
	if (r != IDEM_OK) {
		if (r != IDEM_ERR_KEY || strncmp(err.msg, "schema id 42: ", 14) != 0)
			abort();
		return 0;
	}
	for (size_t i = 0; i < sizeof(pointers) / sizeof(pointers[0]); i++) {
		read_one(dec, pointers[i], false, &out);
		read_one(dec, pointers[i], true, &out);
	}
	idem_buf_done(&out);
	idem_pb_dec_reset(dec);
	return 0;
}
