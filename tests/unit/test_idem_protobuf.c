/*
 * test_idem_protobuf.c - Protobuf in the Confluent wire format: schemas and their imports, the
 * message indexes, the walker (where it fails and what it says), and the text of every type
 * read through pointers. Messages are written here field by field (struct enc), two of them as
 * bytes from the reference encoder (python3-protobuf 3.21, pasted below).
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "idem_common.h"
#include "idem_limits.h"
#include "idem_protobuf.h"
/* cmocka.h needs the headers above. */
#include <cmocka.h>

/* The Kafka value's bytes before the body: magic byte and schema id. */
#define AT 5

static const char shop_proto[] = "syntax = \"proto3\";\n"
                                 "package shop;\n"
                                 "\n"
                                 "import \"google/protobuf/duration.proto\";\n"
                                 "import \"google/protobuf/struct.proto\";\n"
                                 "import \"google/protobuf/timestamp.proto\";\n"
                                 "import \"google/protobuf/wrappers.proto\";\n"
                                 "\n"
                                 "enum Color {\n"
                                 "  RED = 0;\n"
                                 "  GREEN = 1;\n"
                                 "  BLUE = 2;\n"
                                 "}\n"
                                 "\n"
                                 "message All {\n"
                                 "  message Inner {\n"
                                 "    string x = 1;\n"
                                 "  }\n"
                                 "  message Other {\n"
                                 "    int32 y = 1;\n"
                                 "  }\n"
                                 "  string s = 1;\n"
                                 "  int32 i32 = 2;\n"
                                 "  int64 i64 = 3;\n"
                                 "  uint32 u32 = 4;\n"
                                 "  uint64 u64 = 5;\n"
                                 "  sint32 s32 = 6;\n"
                                 "  sint64 s64 = 7;\n"
                                 "  fixed32 f32 = 8;\n"
                                 "  fixed64 f64 = 9;\n"
                                 "  sfixed32 sf32 = 10;\n"
                                 "  sfixed64 sf64 = 11;\n"
                                 "  float fl = 12;\n"
                                 "  double db = 13;\n"
                                 "  bool b = 14;\n"
                                 "  bytes by = 15;\n"
                                 "  Color color = 16;\n"
                                 "  optional string opt = 17;\n"
                                 "  Item item = 18;\n"
                                 "  repeated Item items = 19;\n"
                                 "  repeated int32 nums = 20;\n"
                                 "  repeated int32 loose = 21 [packed = false];\n"
                                 "  map<string, int64> counts = 22;\n"
                                 "  map<int32, Item> by_id = 23;\n"
                                 "  map<bool, string> flags = 24;\n"
                                 "  oneof choice {\n"
                                 "    string name = 25;\n"
                                 "    int32 code = 26;\n"
                                 "  }\n"
                                 "  google.protobuf.Timestamp ts = 27;\n"
                                 "  google.protobuf.Duration dur = 28;\n"
                                 "  google.protobuf.Int64Value w64 = 29;\n"
                                 "  google.protobuf.StringValue wstr = 30;\n"
                                 "  google.protobuf.BytesValue wbytes = 31;\n"
                                 "  google.protobuf.Struct st = 32;\n"
                                 "  google.protobuf.Value val = 33;\n"
                                 "  google.protobuf.ListValue lst = 34;\n"
                                 "  repeated string tags = 35;\n"
                                 "  repeated bytes blobs = 36;\n"
                                 "  repeated Color colors = 37;\n"
                                 "  repeated double reals = 38;\n"
                                 "  repeated google.protobuf.Timestamp times = 39;\n"
                                 "  Inner inner = 40;\n"
                                 "  repeated google.protobuf.Value vals = 41;\n"
                                 "}\n"
                                 "\n"
                                 "message Item {\n"
                                 "  string sku = 1;\n"
                                 "  int32 qty = 2;\n"
                                 "}\n"
                                 "\n"
                                 "message Node {\n"
                                 "  Node next = 1;\n"
                                 "  int32 v = 2;\n"
                                 "}\n";

static const char legacy_proto[] = "syntax = \"proto2\";\n"
                                   "package legacy;\n"
                                   "enum Kind { K0 = 0; K1 = 1; }\n"
                                   "message Rec {\n"
                                   "  optional string name = 1;\n"
                                   "  optional int32 n = 2 [default = 5];\n"
                                   "  optional Kind kind = 3;\n"
                                   "  required int64 id = 4;\n"
                                   "  repeated int32 vals = 5;\n"
                                   "}\n";

/* A Protobuf binary encoder for the tests. */
struct enc {
	uint8_t b[4096];
	size_t n;
};

static void put_raw(struct enc *e, const void *p, size_t n)
{
	assert_true(e->n + n <= sizeof(e->b));
	memcpy(e->b + e->n, p, n);
	e->n += n;
}

static void put_byte(struct enc *e, uint8_t c)
{
	put_raw(e, &c, 1);
}

static void put_varint(struct enc *e, uint64_t v)
{
	while (v >= 0x80) {
		put_byte(e, (uint8_t)(v | 0x80));
		v >>= 7;
	}
	put_byte(e, (uint8_t)v);
}

static void put_tag(struct enc *e, int field, int wt)
{
	put_varint(e, (uint64_t)field << 3 | (uint64_t)wt);
}

/* Field @field = varint @v. */
static void put_vf(struct enc *e, int field, uint64_t v)
{
	put_tag(e, field, 0);
	put_varint(e, v);
}

/* Field @field = @p[0..n), length-delimited. */
static void put_lf(struct enc *e, int field, const void *p, size_t n)
{
	put_tag(e, field, 2);
	put_varint(e, n);
	put_raw(e, p, n);
}

static void put_sf(struct enc *e, int field, const char *s)
{
	put_lf(e, field, s, strlen(s));
}

static void put_mf(struct enc *e, int field, const struct enc *m)
{
	put_lf(e, field, m->b, m->n);
}

static void put_df(struct enc *e, int field, double d)
{
	uint64_t u;

	memcpy(&u, &d, 8);
	put_tag(e, field, 1);
	for (int i = 0; i < 8; i++)
		put_byte(e, (uint8_t)(u >> (8 * i)));
}

static void put_ff(struct enc *e, int field, float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	put_tag(e, field, 5);
	for (int i = 0; i < 4; i++)
		put_byte(e, (uint8_t)(u >> (8 * i)));
}

/* An Item { sku = @sku, qty = @qty }. */
static struct enc item(const char *sku, int qty)
{
	struct enc e = { .n = 0 };

	put_sf(&e, 1, sku);
	put_vf(&e, 2, (uint64_t)qty);
	return e;
}

static idem_pb_schema *schema_of(const char *name, const char *text,
                                 const struct idem_pb_file *deps, size_t n_deps)
{
	idem_pb_schema *s = NULL;
	idem_error err = { 0 };
	idem_status r = idem_pb_schema_new(name, text, strlen(text), deps, n_deps, &s, &err);

	if (r != IDEM_OK)
		print_error("schema: %s\n", err.msg);
	assert_int_equal(r, IDEM_OK);
	assert_non_null(s);
	return s;
}

static void schema_fails(const char *text, const struct idem_pb_file *deps, size_t n_deps,
                         const char *want)
{
	idem_pb_schema *s = NULL;
	idem_error err = { 0 };

	assert_int_equal(
	        idem_pb_schema_new("order.proto", text, strlen(text), deps, n_deps, &s, &err),
	        IDEM_ERR_INVALID);
	assert_null(s);
	assert_string_equal(err.msg, want);
}

static void decode_ok(idem_pb_dec *dec, const idem_pb_schema *s, const void *p, size_t n)
{
	idem_error err = { 0 };
	idem_status r = idem_pb_decode(dec, s, 7, AT, p, n, &err);

	if (r != IDEM_OK)
		print_error("decode: %s\n", err.msg);
	assert_int_equal(r, IDEM_OK);
}

/* Message @m of type [0] (a body of the single index byte 0, then @m). */
static void decode0(idem_pb_dec *dec, const idem_pb_schema *s, const struct enc *m)
{
	struct enc body = { .n = 0 };

	put_byte(&body, 0);
	put_raw(&body, m->b, m->n);
	decode_ok(dec, s, body.b, body.n);
}

static void decode_fails(idem_pb_dec *dec, const idem_pb_schema *s, const void *p, size_t n,
                         const char *want)
{
	idem_error err = { 0 };

	assert_int_equal(idem_pb_decode(dec, s, 7, AT, p, n, &err), IDEM_ERR_KEY);
	assert_string_equal(err.msg, want);
}

static void text_is(const idem_pb_dec *dec, const char *ptr, const char *want)
{
	struct idem_buf out = { 0 };
	const char *absent = "unset";
	idem_error err = { 0 };
	idem_status r = idem_pb_read(dec, ptr, false, &out, &absent, &err);

	if (r != IDEM_OK)
		print_error("read '%s': %s\n", ptr, err.msg);
	assert_int_equal(r, IDEM_OK);
	if (absent != NULL)
		print_error("read '%s': absent: %s\n", ptr, absent);
	assert_null(absent);
	assert_non_null(out.data);
	assert_string_equal(out.data, want);
	assert_int_equal(out.len, strlen(want));
	idem_buf_done(&out);
}

/* Like text_is() with @scalar: the text of a business key. */
static void key_is(const idem_pb_dec *dec, const char *ptr, const char *want)
{
	struct idem_buf out = { 0 };
	const char *absent = "unset";
	idem_error err = { 0 };

	assert_int_equal(idem_pb_read(dec, ptr, true, &out, &absent, &err), IDEM_OK);
	assert_null(absent);
	assert_string_equal(out.data, want);
	idem_buf_done(&out);
}

static void absent_is(const idem_pb_dec *dec, const char *ptr, const char *why)
{
	struct idem_buf out = { 0 };
	const char *absent = NULL;
	idem_error err = { 0 };

	assert_int_equal(idem_pb_read(dec, ptr, false, &out, &absent, &err), IDEM_OK);
	assert_non_null(absent);
	assert_string_equal(absent, why);
	assert_int_equal(out.len, 0);
	idem_buf_done(&out);
}

static void read_fails(const idem_pb_dec *dec, const char *ptr, bool scalar, idem_status code,
                       const char *want)
{
	struct idem_buf out = { 0 };
	const char *absent = NULL;
	idem_error err = { 0 };

	assert_int_equal(idem_pb_read(dec, ptr, scalar, &out, &absent, &err), code);
	assert_string_equal(err.msg, want);
	assert_int_equal(out.len, 0);
	idem_buf_done(&out);
}

/*
 * All { s = "héllo", i32 = -5, i64 = -9000000000, u32 = 4000000000, u64 = 2^64-1, s32 = -3,
 * s64 = -2^63, f32 = 4000000000, f64 = 2^64-1, sf32 = -7, sf64 = -2^63, fl = 1.1, db = 0.1,
 * b = true, by = 0a 1b 00 ff, color = BLUE }, by python3-protobuf's SerializeToString().
 */
static const uint8_t all_scalars[] = {
	0x0a, 0x06, 0x68, 0xc3, 0xa9, 0x6c, 0x6c, 0x6f, 0x10, 0xfb, 0xff, 0xff, 0xff, 0xff, 0xff,
	0xff, 0xff, 0xff, 0x01, 0x18, 0x80, 0xcc, 0xbb, 0xbc, 0xde, 0xff, 0xff, 0xff, 0xff, 0x01,
	0x20, 0x80, 0xd0, 0xac, 0xf3, 0x0e, 0x28, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	0xff, 0x01, 0x30, 0x05, 0x38, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
	0x45, 0x00, 0x28, 0x6b, 0xee, 0x49, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x55,
	0xf9, 0xff, 0xff, 0xff, 0x59, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x65, 0xcd,
	0xcc, 0x8c, 0x3f, 0x69, 0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0x3f, 0x70, 0x01, 0x7a,
	0x04, 0x0a, 0x1b, 0x00, 0xff, 0x80, 0x01, 0x02,
};

static void test_scalars(void **state)
{
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	struct enc m = { .n = 0 };

	(void)state;
	assert_non_null(dec);
	put_raw(&m, all_scalars, sizeof(all_scalars));
	decode0(dec, s, &m);
	text_is(dec, "/s", "h\xc3\xa9llo");
	text_is(dec, "/i32", "-5"); /* a 10-byte varint */
	text_is(dec, "/i64", "-9000000000");
	text_is(dec, "/u32", "4000000000");
	text_is(dec, "/u64", "18446744073709551615");
	text_is(dec, "/s32", "-3"); /* zig-zag 5 */
	text_is(dec, "/s64", "-9223372036854775808");
	text_is(dec, "/f32", "4000000000");
	text_is(dec, "/f64", "18446744073709551615");
	text_is(dec, "/sf32", "-7");
	text_is(dec, "/sf64", "-9223372036854775808");
	text_is(dec, "/fl", "1.1");
	text_is(dec, "/db", "0.1");
	text_is(dec, "/b", "true");
	text_is(dec, "/by", "\\x0a1b00ff");
	text_is(dec, "/color", "BLUE");
	key_is(dec, "/i32", "-5");
	key_is(dec, "/by", "\\x0a1b00ff");
	/* Not in the value: optional, so absent. */
	absent_is(dec, "/opt", "is not set");
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s);
}

static void test_reals_and_enums(void **state)
{
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	struct enc m = { .n = 0 };

	(void)state;
	put_ff(&m, 12, 3.4028235e38f);
	put_df(&m, 13, NAN);
	put_vf(&m, 16, 7); /* a number Color does not name */
	put_df(&m, 38, INFINITY);
	put_df(&m, 38, -INFINITY);
	put_df(&m, 38, -0.0);
	put_df(&m, 38, 5e-324);
	put_df(&m, 38, 1e21);
	put_vf(&m, 37, 1);
	put_vf(&m, 37, 9);
	decode0(dec, s, &m);
	text_is(dec, "/fl", "3.4028235e+38");
	text_is(dec, "/db", "NaN");
	text_is(dec, "/color", "7");
	text_is(dec, "/reals/0", "Infinity");
	text_is(dec, "/reals/1", "-Infinity");
	text_is(dec, "/reals/2", "-0");
	text_is(dec, "/reals/3", "5e-324");
	text_is(dec, "/reals/4", "1e+21");
	text_is(dec, "/reals", "[\"Infinity\",\"-Infinity\",-0,5e-324,1e+21]");
	text_is(dec, "/colors/1", "9");
	text_is(dec, "/colors", "[\"GREEN\",9]");
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s);
}

/*
 * All { ts = 1796292020 s 21000000 ns, dur = 1 s 340012 ns, w64 = -42, wstr = "",
 * wbytes = 01, st = { k: "text", n: 2.5, t: true, z: null, list: [1, "two", {x: "y"}],
 * obj: {"a/b": "slash", "m~n": "tilde"} }, val = "v", lst = [3, false] }, by python3-protobuf
 * (deterministic).
 */
static const uint8_t all_wkt[] = {
	0xda, 0x01, 0x0b, 0x08, 0xb4, 0xfb, 0xc4, 0xd8, 0x06, 0x10, 0xc0, 0xde, 0x81, 0x0a, 0xe2,
	0x01, 0x06, 0x08, 0x01, 0x10, 0xac, 0xe0, 0x14, 0xea, 0x01, 0x0b, 0x08, 0xd6, 0xff, 0xff,
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0xf2, 0x01, 0x00, 0xfa, 0x01, 0x03, 0x0a, 0x01,
	0x01, 0x82, 0x02, 0x86, 0x01, 0x0a, 0x0b, 0x0a, 0x01, 0x6b, 0x12, 0x06, 0x1a, 0x04, 0x74,
	0x65, 0x78, 0x74, 0x0a, 0x2a, 0x0a, 0x04, 0x6c, 0x69, 0x73, 0x74, 0x12, 0x22, 0x32, 0x20,
	0x0a, 0x09, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x3f, 0x0a, 0x05, 0x1a, 0x03,
	0x74, 0x77, 0x6f, 0x0a, 0x0c, 0x2a, 0x0a, 0x0a, 0x08, 0x0a, 0x01, 0x78, 0x12, 0x03, 0x1a,
	0x01, 0x79, 0x0a, 0x0e, 0x0a, 0x01, 0x6e, 0x12, 0x09, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x04, 0x40, 0x0a, 0x29, 0x0a, 0x03, 0x6f, 0x62, 0x6a, 0x12, 0x22, 0x2a, 0x20, 0x0a,
	0x0e, 0x0a, 0x03, 0x61, 0x2f, 0x62, 0x12, 0x07, 0x1a, 0x05, 0x73, 0x6c, 0x61, 0x73, 0x68,
	0x0a, 0x0e, 0x0a, 0x03, 0x6d, 0x7e, 0x6e, 0x12, 0x07, 0x1a, 0x05, 0x74, 0x69, 0x6c, 0x64,
	0x65, 0x0a, 0x07, 0x0a, 0x01, 0x74, 0x12, 0x02, 0x20, 0x01, 0x0a, 0x07, 0x0a, 0x01, 0x7a,
	0x12, 0x02, 0x08, 0x00, 0x8a, 0x02, 0x03, 0x1a, 0x01, 0x76, 0x92, 0x02, 0x0f, 0x0a, 0x09,
	0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x40, 0x0a, 0x02, 0x20, 0x00,
};

static void test_well_known_types(void **state)
{
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	struct enc m = { .n = 0 };

	(void)state;
	put_raw(&m, all_wkt, sizeof(all_wkt));
	decode0(dec, s, &m);
	text_is(dec, "/ts", "2026-12-03T10:00:20.021Z");
	key_is(dec, "/ts", "2026-12-03T10:00:20.021Z");
	text_is(dec, "/dur", "1.000340012s");
	text_is(dec, "/w64", "-42");
	key_is(dec, "/w64", "-42");
	text_is(dec, "/wstr", ""); /* set, to its default */
	text_is(dec, "/wbytes", "\\x01");
	absent_is(dec, "/wbool", "not found in value");
	text_is(dec, "/st/k", "text");
	text_is(dec, "/st/n", "2.5");
	text_is(dec, "/st/t", "true");
	absent_is(dec, "/st/z", "is null");
	text_is(dec, "/st/list/0", "1");
	text_is(dec, "/st/list/1", "two");
	text_is(dec, "/st/list/2/x", "y");
	text_is(dec, "/st/list/2", "{\"x\":\"y\"}");
	absent_is(dec, "/st/list/3", "not found in value");
	absent_is(dec, "/st/k/0", "not found in value");
	text_is(dec, "/st/obj/a~1b", "slash");
	text_is(dec, "/st/obj/m~0n", "tilde");
	absent_is(dec, "/st/fields", "not found in value");
	text_is(dec, "/st/list", "[1,\"two\",{\"x\":\"y\"}]");
	text_is(dec, "/st",
	        "{\"k\":\"text\",\"list\":[1,\"two\",{\"x\":\"y\"}],\"n\":2.5,\"obj\":{\"a/b\":"
	        "\"slash\",\"m~n\":\"tilde\"},\"t\":true,\"z\":null}");
	text_is(dec, "/val", "v");
	key_is(dec, "/val", "v");
	text_is(dec, "/lst/0", "3");
	text_is(dec, "/lst/1", "false");
	text_is(dec, "/lst", "[3,false]");
	read_fails(dec, "/st", true, IDEM_ERR_KEY, "is a message, not a scalar");
	read_fails(dec, "/st/list", true, IDEM_ERR_KEY, "is a message, not a scalar");
	read_fails(dec, "/lst", true, IDEM_ERR_KEY, "is a message, not a scalar");
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s);
}

/*
 * A google.protobuf.Value of no kind (which the JSON mapping does not allow): absent, left out
 * of libprotobuf's JSON of a ListValue or a Struct, null in a repeated field written here.
 */
static void test_empty_values(void **state)
{
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	/* lst = [ {}, true ], vals = [ {}, "x" ], st = { "a": {} } */
	static const uint8_t m[] = { 0x00, 0x92, 0x02, 0x06, 0x0a, 0x00, 0x0a, 0x02, 0x20, 0x01,
		                     0xca, 0x02, 0x00, 0xca, 0x02, 0x03, 0x1a, 0x01, 'x',  0x82,
		                     0x02, 0x07, 0x0a, 0x05, 0x0a, 0x01, 'a',  0x12, 0x00 };

	(void)state;
	decode_ok(dec, s, m, sizeof(m));
	absent_is(dec, "/lst/0", "is not set");
	text_is(dec, "/lst/1", "true");
	text_is(dec, "/lst", "[true]");
	absent_is(dec, "/vals/0", "is not set");
	text_is(dec, "/vals/1", "x");
	text_is(dec, "/vals", "[null,\"x\"]");
	absent_is(dec, "/st/a", "is not set");
	text_is(dec, "/st", "{}");
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s);
}

/* Timestamps and durations: 0, 3, 6 or 9 digits of fraction, and what is out of range. */
static void test_times(void **state)
{
	static const struct {
		int field;
		int64_t seconds;
		int32_t nanos;
		const char *want;
	} cases[] = {
		{ 27, 0, 0, "1970-01-01T00:00:00Z" },
		{ 27, -62135596800, 0, "0001-01-01T00:00:00Z" },
		{ 27, 253402300799, 999999999, "9999-12-31T23:59:59.999999999Z" },
		{ 27, 1796292020, 21000, "2026-12-03T10:00:20.000021Z" },
		{ 27, -1, 500000000, "1969-12-31T23:59:59.500Z" },
		{ 28, 0, 0, "0s" },
		{ 28, -1, -500000000, "-1.500s" },
		{ 28, 0, -1000, "-0.000001s" },
		{ 28, 315576000000, 0, "315576000000s" },
		{ 27, 253402300800, 0, NULL },
		{ 27, -62135596801, 0, NULL },
		{ 27, 0, -1, NULL },
		{ 27, 0, 1000000000, NULL },
		{ 27, INT64_MIN, 0, NULL },
		{ 28, INT64_MIN, 0, NULL },
		{ 28, 315576000001, 0, NULL },
		{ 28, 1, -1, NULL },
		{ 28, -1, 1, NULL },
		{ 28, 0, 1000000000, NULL },
	};
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	char want[256];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct enc m = { .n = 0 }, t = { .n = 0 };
		const char *ptr = cases[i].field == 27 ? "/ts" : "/dur";

		put_vf(&t, 1, (uint64_t)cases[i].seconds);
		put_vf(&t, 2, (uint64_t)(int64_t)cases[i].nanos);
		put_mf(&m, cases[i].field, &t);
		put_mf(&m, 39, &t);
		decode0(dec, s, &m);
		if (cases[i].want != NULL) {
			text_is(dec, ptr, cases[i].want);
			snprintf(want, sizeof(want), "[\"%s\"]", cases[i].want);
			if (cases[i].field == 27)
				text_is(dec, "/times", want);
			continue;
		}
		snprintf(want, sizeof(want),
		         "%s of %" PRId64 " seconds and %" PRId32 " nanos is out of range %s",
		         cases[i].field == 27 ? "Timestamp" : "Duration", cases[i].seconds,
		         cases[i].nanos,
		         cases[i].field == 27 ? "(years 1 to 9999, nanos 0 to 999999999)"
		                              : "(10000 years, nanos of the seconds' sign)");
		read_fails(dec, ptr, false, IDEM_ERR_KEY, want);
		read_fails(dec, ptr, true, IDEM_ERR_KEY, want);
	}
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s);
}

static void test_nested_and_repeated(void **state)
{
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	struct enc m = { .n = 0 }, it, packed = { .n = 0 }, inner = { .n = 0 };

	(void)state;
	it = item("A1", 2);
	put_mf(&m, 18, &it);
	it = item("B\"2\n", 0);
	put_mf(&m, 19, &it);
	put_sf(&m, 35, "first");
	it = item("C3", -1);
	put_mf(&m, 19, &it);
	put_varint(&packed, 1);
	put_varint(&packed, (uint64_t)-2);
	put_varint(&packed, 300);
	put_lf(&m, 20, packed.b, packed.n); /* nums: packed */
	put_vf(&m, 20, 4);                  /* and one more, unpacked */
	put_vf(&m, 21, 5);                  /* loose: unpacked */
	put_lf(&m, 21, packed.b, 1);        /* and packed */
	put_sf(&m, 35, "sec\xc3\xb6nd\x01");
	put_lf(&m, 36, "\x00\xff\x10", 3);
	put_lf(&m, 36, "", 0);
	put_sf(&inner, 1, "deep");
	put_mf(&m, 40, &inner);
	decode0(dec, s, &m);
	text_is(dec, "/item", "{\"sku\":\"A1\",\"qty\":2}");
	text_is(dec, "/item/sku", "A1");
	text_is(dec, "/items/0/sku", "B\"2\n");
	text_is(dec, "/items/0/qty", "0");
	text_is(dec, "/items/1/qty", "-1");
	text_is(dec, "/items/1", "{\"sku\":\"C3\",\"qty\":-1}");
	text_is(dec, "/items", "[{\"sku\":\"B\\\"2\\n\",\"qty\":0},{\"sku\":\"C3\",\"qty\":-1}]");
	absent_is(dec, "/items/2", "not found in value");
	absent_is(dec, "/items/01", "not found in value");
	absent_is(dec, "/items/-1", "not found in value");
	absent_is(dec, "/items/x", "not found in value");
	absent_is(dec, "/items/0/nope", "not found in value");
	absent_is(dec, "/items/0/sku/0", "not found in value");
	text_is(dec, "/nums/0", "1");
	text_is(dec, "/nums/1", "-2");
	text_is(dec, "/nums/3", "4");
	text_is(dec, "/nums", "[1,-2,300,4]");
	text_is(dec, "/loose", "[5,1]");
	text_is(dec, "/tags", "[\"first\",\"sec\xc3\xb6nd\\u0001\"]");
	text_is(dec, "/tags/1", "sec\xc3\xb6nd\x01");
	text_is(dec, "/blobs", "[\"AP8Q\",\"\"]");
	text_is(dec, "/blobs/0", "\\x00ff10");
	text_is(dec, "/inner/x", "deep");
	text_is(dec, "/inner", "{\"x\":\"deep\"}");
	text_is(dec, "/counts", "{}");
	text_is(dec, "/reals", "[]");
	read_fails(dec, "/item", true, IDEM_ERR_KEY, "is a message, not a scalar");
	read_fails(dec, "/items", true, IDEM_ERR_KEY, "is a repeated field, not a scalar");
	read_fails(dec, "/nums", true, IDEM_ERR_KEY, "is a repeated field, not a scalar");
	read_fails(dec, "", true, IDEM_ERR_KEY, "is a message, not a scalar");
	key_is(dec, "/items/1/sku", "C3");
	key_is(dec, "/nums/2", "300");
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s);
}

/* The whole message as JSON: proto3 JSON mapping, .proto names, unset scalars as defaults. */
static void test_whole_message(void **state)
{
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	struct enc m = { .n = 0 }, it = item("A1", 2);

	(void)state;
	put_sf(&m, 1, "x");
	put_vf(&m, 3, 5);
	put_lf(&m, 15, "\x01\x02", 2);
	put_vf(&m, 16, 2);
	put_mf(&m, 18, &it);
	put_vf(&m, 26, 9);
	decode0(dec, s, &m);
	/* Unset fields with presence (opt, name, ts, inner...) are left out. */
	text_is(dec, "",
	        "{\"s\":\"x\",\"i32\":0,\"i64\":\"5\",\"u32\":0,\"u64\":\"0\",\"s32\":0,\"s64\":"
	        "\"0\",\"f32\":0,\"f64\":\"0\",\"sf32\":0,\"sf64\":\"0\",\"fl\":0,\"db\":0,\"b\":"
	        "false,\"by\":\"AQI=\",\"color\":\"BLUE\",\"item\":{\"sku\":\"A1\",\"qty\":2},"
	        "\"items\":[],\"nums\":[],\"loose\":[],\"counts\":{},\"by_id\":{},\"flags\":{},"
	        "\"tags\":[],\"blobs\":[],\"colors\":[],\"reals\":[],\"times\":[],\"vals\":[],"
	        "\"code\":9}");
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s);
}

static void test_maps(void **state)
{
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	struct enc m = { .n = 0 }, e, it;
	static const char *const keys[] = { "b", "a/b", "", "a" };
	static const int ids[] = { 7, -1, 300 };

	(void)state;
	/* Entries in an order other than the keys'. */
	for (size_t i = 0; i < 4; i++) {
		e.n = 0;
		put_sf(&e, 1, keys[i]);
		put_vf(&e, 2, (uint64_t)(int64_t)(i * 10) - 5);
		put_mf(&m, 22, &e);
	}
	for (size_t i = 0; i < 3; i++) {
		e.n = 0;
		it = item(i == 0 ? "seven" : "other", (int)i);
		put_vf(&e, 1, (uint64_t)(int64_t)ids[i]);
		put_mf(&e, 2, &it);
		put_mf(&m, 23, &e);
	}
	e.n = 0; /* the value first, then the key */
	put_sf(&e, 2, "yes");
	put_vf(&e, 1, 1);
	put_mf(&m, 24, &e);
	e.n = 0; /* only a value: the key is false */
	put_sf(&e, 2, "no");
	put_mf(&m, 24, &e);
	decode0(dec, s, &m);
	text_is(dec, "/counts/b", "-5");
	text_is(dec, "/counts/a~1b", "5");
	text_is(dec, "/counts/", "15");
	text_is(dec, "/counts/a", "25");
	absent_is(dec, "/counts/c", "not found in value");
	text_is(dec, "/counts", "{\"\":\"15\",\"a\":\"25\",\"a/b\":\"5\",\"b\":\"-5\"}");
	read_fails(dec, "/counts", true, IDEM_ERR_KEY, "is a map, not a scalar");
	text_is(dec, "/by_id/7/sku", "seven");
	text_is(dec, "/by_id/-1/qty", "1");
	text_is(dec, "/by_id/300", "{\"sku\":\"other\",\"qty\":2}");
	absent_is(dec, "/by_id/07", "not found in value");
	text_is(dec, "/by_id",
	        "{\"-1\":{\"sku\":\"other\",\"qty\":1},\"7\":{\"sku\":\"seven\",\"qty\":0},"
	        "\"300\":{\"sku\":\"other\",\"qty\":2}}");
	text_is(dec, "/flags/true", "yes");
	text_is(dec, "/flags/false", "no");
	absent_is(dec, "/flags/1", "not found in value");
	text_is(dec, "/flags", "{\"false\":\"no\",\"true\":\"yes\"}");
	/* The whole message writes maps by key, too. */
	{
		struct idem_buf out = { 0 };
		const char *absent = NULL;

		assert_int_equal(idem_pb_read(dec, "", false, &out, &absent, NULL), IDEM_OK);
		assert_non_null(
		        strstr(out.data,
		               "\"counts\":{\"\":\"15\",\"a\":\"25\",\"a/b\":\"5\",\"b\":\"-5\"}"));
		assert_non_null(strstr(out.data, "\"flags\":{\"false\":\"no\",\"true\":\"yes\"}"));
		idem_buf_done(&out);
	}
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s);
}

static void test_presence(void **state)
{
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_schema *legacy = schema_of("legacy.proto", legacy_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	struct enc m = { .n = 0 };

	(void)state;
	decode0(dec, s, &m); /* an empty message */
	text_is(dec, "/s", "");
	text_is(dec, "/i32", "0");
	text_is(dec, "/color", "RED");
	text_is(dec, "/b", "false");
	text_is(dec, "/by", "\\x");
	absent_is(dec, "/opt", "is not set");
	absent_is(dec, "/item", "is not set");
	absent_is(dec, "/item/sku", "is not set");
	absent_is(dec, "/ts", "is not set");
	absent_is(dec, "/w64", "is not set");
	absent_is(dec, "/st/k", "is not set");
	absent_is(dec, "/name", "is not set");
	absent_is(dec, "/code", "is not set");
	absent_is(dec, "/nope", "not found in value");
	absent_is(dec, "/choice", "not found in value");
	absent_is(dec, "/nums/0", "not found in value");

	put_sf(&m, 17, ""); /* optional, set to its default */
	put_sf(&m, 25, "n");
	put_vf(&m, 26, 0); /* the last member of the oneof wins */
	put_lf(&m, 18, "", 0);
	decode0(dec, s, &m);
	text_is(dec, "/opt", "");
	text_is(dec, "/code", "0");
	absent_is(dec, "/name", "is not set");
	text_is(dec, "/item/sku", "");
	text_is(dec, "/item", "{\"sku\":\"\",\"qty\":0}");

	/* proto2: every singular field has presence; a closed enum keeps unknown numbers out. */
	m.n = 0;
	put_vf(&m, 3, 7);
	put_vf(&m, 4, 1);
	decode0(dec, legacy, &m);
	absent_is(dec, "/name", "is not set");
	absent_is(dec, "/n", "is not set");
	absent_is(dec, "/kind", "is not set");
	text_is(dec, "/id", "1");
	/* libprotobuf's JSON prints proto2 defaults too, the unknown kind not. */
	text_is(dec, "", "{\"name\":\"\",\"n\":5,\"kind\":\"K0\",\"id\":\"1\",\"vals\":[]}");
	m.n = 0; /* a required field missing is absent too */
	put_vf(&m, 2, 0);
	put_vf(&m, 3, 1);
	decode0(dec, legacy, &m);
	absent_is(dec, "/id", "is not set");
	text_is(dec, "/n", "0");
	text_is(dec, "/kind", "K1");
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(legacy);
	idem_pb_schema_unref(s);
}

/* Message indexes: which message of the file the value is. */
static void test_message_indexes(void **state)
{
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	/* [1]: Item { sku = "k", qty = 3 } */
	static const uint8_t item1[] = { 0x02, 0x02, 0x0a, 0x01, 'k', 0x10, 0x03 };
	/* [0, 1]: All.Other { y = 4 } */
	static const uint8_t other[] = { 0x04, 0x00, 0x02, 0x08, 0x04 };
	/* [0, 0]: All.Inner { x = "i" } */
	static const uint8_t inner[] = { 0x04, 0x00, 0x00, 0x0a, 0x01, 'i' };
	/* 0: All { s = "a" } */
	static const uint8_t compact[] = { 0x00, 0x0a, 0x01, 'a' };
	/* [0] written out: All { s = "b" } */
	static const uint8_t explicit0[] = { 0x02, 0x00, 0x0a, 0x01, 'b' };
	/* [2]: Node {} */
	static const uint8_t node[] = { 0x02, 0x04 };

	(void)state;
	decode_ok(dec, s, item1, sizeof(item1));
	text_is(dec, "", "{\"sku\":\"k\",\"qty\":3}");
	decode_ok(dec, s, other, sizeof(other));
	text_is(dec, "/y", "4");
	decode_ok(dec, s, inner, sizeof(inner));
	text_is(dec, "", "{\"x\":\"i\"}");
	decode_ok(dec, s, compact, sizeof(compact));
	text_is(dec, "/s", "a");
	decode_ok(dec, s, explicit0, sizeof(explicit0));
	text_is(dec, "/s", "b");
	decode_ok(dec, s, node, sizeof(node));
	text_is(dec, "/v", "0");

	decode_fails(
	        dec, s, "", 0,
	        "schema id 7: at byte 5: message indexes run past the end of the value (5 bytes)");
	decode_fails(
	        dec, s, "\x04\x00", 2,
	        "schema id 7: at byte 7: message indexes run past the end of the value (7 bytes)");
	decode_fails(
	        dec, s, "\x02\x80", 2,
	        "schema id 7: at byte 6: message indexes run past the end of the value (7 bytes)");
	decode_fails(dec, s, "\x02\x06", 2,
	             "schema id 7: message indexes [3] name no message: the file has 3");
	decode_fails(
	        dec, s, "\x04\x00\x0a", 3,
	        "schema id 7: message indexes [0, 5] name no message: 'shop.All' has 5 nested messages");
	decode_fails(
	        dec, s, "\x06\x00\x00\x00", 4,
	        "schema id 7: message indexes [0, 0, 0] name no message: 'shop.All.Inner' has 0 nested messages");
	decode_fails(dec, s, "\x01", 1,
	             "schema id 7: at byte 5: message index count -1 is negative");
	decode_fails(dec, s, "\x02\x03", 2, "schema id 7: at byte 6: message index -2 is negative");
	decode_fails(dec, s, "\x82\x01", 2,
	             "schema id 7: at byte 5: 65 message indexes are more than 64");
	decode_fails(dec, s, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11,
	             "schema id 7: at byte 5: a message index is longer than 10 bytes");
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s);
}

static const char order_proto[] = "syntax = \"proto3\";\n"
                                  "package shop;\n"
                                  "import \"common/money.proto\";\n"
                                  "import \"google/protobuf/timestamp.proto\";\n"
                                  "message Order {\n"
                                  "  string id = 1;\n"
                                  "  common.Money total = 2;\n"
                                  "  google.protobuf.Timestamp at = 3;\n"
                                  "}\n";
static const char money_proto[] = "syntax = \"proto3\";\n"
                                  "package common;\n"
                                  "import \"common/currency.proto\";\n"
                                  "message Money {\n"
                                  "  Currency currency = 1;\n"
                                  "  int64 units = 2;\n"
                                  "}\n";
static const char currency_proto[] = "syntax = \"proto3\";\n"
                                     "package common;\n"
                                     "enum Currency { EUR = 0; USD = 1; }\n";

static void test_imports(void **state)
{
	/* Given before the file it imports: the schema builds them in import order. */
	const struct idem_pb_file deps[] = {
		{ "common/money.proto", money_proto, sizeof(money_proto) - 1 },
		{ "common/currency.proto", currency_proto, sizeof(currency_proto) - 1 },
	};
	idem_pb_schema *s = schema_of("order.proto", order_proto, deps, 2);
	idem_pb_dec *dec = idem_pb_dec_new();
	struct enc m = { .n = 0 }, money = { .n = 0 }, at = { .n = 0 };

	(void)state;
	put_vf(&money, 1, 1);
	put_vf(&money, 2, 1250);
	put_vf(&at, 1, 1796292020);
	put_sf(&m, 1, "o-1");
	put_mf(&m, 2, &money);
	put_mf(&m, 3, &at);
	decode0(dec, s, &m);
	text_is(dec, "/id", "o-1");
	text_is(dec, "/total/currency", "USD");
	text_is(dec, "/total/units", "1250");
	text_is(dec, "/total", "{\"currency\":\"USD\",\"units\":\"1250\"}");
	text_is(dec, "/at", "2026-12-03T10:00:20Z");
	text_is(dec, "",
	        "{\"id\":\"o-1\",\"total\":{\"currency\":\"USD\",\"units\":\"1250\"},\"at\":"
	        "\"2026-12-03T10:00:20Z\"}");
	/* The decoder holds the schema: it outlives the caller's reference. */
	idem_pb_schema_unref(s);
	text_is(dec, "/total/units", "1250");
	idem_pb_dec_free(dec);
}

static void test_bad_schemas(void **state)
{
	const struct idem_pb_file money_only[] = {
		{ "common/money.proto", money_proto, sizeof(money_proto) - 1 },
	};
	static const char cycle_a[] = "syntax = \"proto3\"; import \"b.proto\"; message A {}";
	static const char cycle_b[] = "syntax = \"proto3\"; import \"a.proto\"; message B {}";
	const struct idem_pb_file cycle[] = {
		{ "a.proto", cycle_a, sizeof(cycle_a) - 1 },
		{ "b.proto", cycle_b, sizeof(cycle_b) - 1 },
	};
	static const char bad_dep[] = "syntax = \"proto3\";\nmessage { }\n";
	const struct idem_pb_file broken[] = {
		{ "a.proto", bad_dep, sizeof(bad_dep) - 1 },
	};

	(void)state;
	schema_fails("syntax = \"proto3\";\nmessage A {\n  int32 x = 1\n}\n", NULL, 0,
	             "line 4:1: Expected \";\".");
	schema_fails(
	        "syntax = \"proto4\";\nmessage A {}\n", NULL, 0,
	        "line 1:10: Unrecognized syntax identifier \"proto4\".  This parser only recognizes \"proto2\" and \"proto3\".");
	schema_fails(order_proto, NULL, 0,
	             "import \"common/money.proto\" was not found (imported by \"order.proto\")");
	schema_fails(
	        order_proto, money_only, 1,
	        "import \"common/currency.proto\" was not found (imported by \"common/money.proto\")");
	schema_fails("syntax = \"proto3\"; import \"a.proto\"; message M {}", cycle, 2,
	             "import cycle: \"order.proto\" -> \"a.proto\" -> \"b.proto\" -> \"a.proto\"");
	schema_fails("syntax = \"proto3\"; import \"a.proto\"; message M {}", broken, 1,
	             "import \"a.proto\": line 2:9: Expected message name.");
	schema_fails("syntax = \"proto3\";\nenum E { A = 0; }\n", NULL, 0,
	             "file defines no message");
	schema_fails("syntax = \"proto3\";\n", NULL, 0, "file defines no message");
	schema_fails(
	        "syntax = \"proto3\"; package google.protobuf; message Timestamp { string x = 1; }",
	        NULL, 0, "package google.protobuf is libprotobuf's");
	schema_fails("syntax = \"proto3\"; message A { Missing m = 1; }", NULL, 0,
	             "order.proto: A.m: \"Missing\" is not defined.");
	schema_fails(
	        "syntax = \"proto3\"; message A { int32 x = 1; string y = 1; }", NULL, 0,
	        "order.proto: A.y: Field number 1 has already been used in \"A\" by field \"x\".");
}

/*
 * @levels messages nested in each other, one a line after the syntax line, the innermost with a
 * field; *@ret_line:@ret_col is where the brace of the last one is.
 */
static void nested_proto(struct idem_buf *t, int levels, int *ret_line, int *ret_col)
{
	assert_int_equal(idem_buf_append_str(t, "syntax = \"proto3\";\n"), IDEM_OK);
	for (int i = 1; i <= levels; i++) {
		int before = (int)t->len;

		assert_int_equal(idem_buf_printf(t, "message M%d {\n", i), IDEM_OK);
		*ret_line = i + 1;
		*ret_col = (int)t->len - before - 1;
	}
	assert_int_equal(idem_buf_append_str(t, "string x = 1;\n"), IDEM_OK);
	for (int i = 0; i < levels; i++)
		assert_int_equal(idem_buf_append_str(t, "}\n"), IDEM_OK);
}

/* What a thread with an eighth of IDEM_THREAD_STACK_BYTES made of a .proto text. */
struct small_stack {
	const char *text;
	idem_status r;
	idem_error err;
};

static void *small_stack_main(void *arg)
{
	struct small_stack *ss = arg;
	idem_pb_schema *s = NULL;

	ss->r = idem_pb_schema_new("deep.proto", ss->text, strlen(ss->text), NULL, 0, &s, &ss->err);
	idem_pb_schema_unref(s);
	return NULL;
}

/* Parses @text on a thread of IDEM_THREAD_STACK_BYTES / 8: the bounds leave that much margin. */
static idem_status parse_on_small_stack(const char *text, idem_error *err)
{
	struct small_stack ss = { .text = text };
	pthread_attr_t a;
	pthread_t t;

	assert_int_equal(pthread_attr_init(&a), 0);
	assert_int_equal(pthread_attr_setstacksize(&a, IDEM_THREAD_STACK_BYTES / 8), 0);
	assert_int_equal(pthread_create(&t, &a, small_stack_main, &ss), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	pthread_attr_destroy(&a);
	*err = ss.err;
	return ss.r;
}

static void scan_ok(const char *text)
{
	idem_error err = { 0 };
	idem_status r = idem_pb_scan(text, strlen(text), &err);

	if (r != IDEM_OK)
		print_error("scan: %s\n", err.msg);
	assert_int_equal(r, IDEM_OK);
}

static void scan_fails(const char *text, const char *want)
{
	idem_error err = { 0 };
	idem_status r = idem_pb_scan(text, strlen(text), &err);

	if (r != IDEM_ERR_INVALID)
		print_error("scan: OK, want '%s'\n", want);
	assert_int_equal(r, IDEM_ERR_INVALID);
	assert_string_equal(err.msg, want);
}

/*
 * The bounds of idem_limits.h, exactly at each and one past it, checked before libprotoc
 * parses the text: nesting (messages, enums, oneofs, option values and the text format's < >),
 * definitions, imports. 20,000 nested messages took libprotoc 3.21 past a thread's stack
 * (SIGSEGV); 200,000 too. Brackets in comments and strings are not counted, and a closing
 * bracket that matches no open one closes nothing.
 */
static void test_schema_bounds(void **state)
{
	struct idem_buf t = { 0 }, u = { 0 };
	char want[160];
	int line = 0, col = 0;
	idem_pb_schema *s;

	(void)state;
	/* libprotobuf builds messages nested 31 deep, its own bound, and refuses 32 cleanly. */
	nested_proto(&t, 31, &line, &col);
	s = schema_of("deep.proto", t.data, NULL, 0);
	idem_pb_schema_unref(s);
	idem_buf_reset(&t);
	nested_proto(&t, IDEM_SCHEMA_MAX_DEPTH, &line, &col);
	scan_ok(t.data);
	{
		/* At the bound, the parser recurses 64 deep: on an eighth of a thread's stack. */
		idem_error err = { 0 };

		assert_int_equal(parse_on_small_stack(t.data, &err), IDEM_ERR_INVALID);
		assert_non_null(
		        strstr(err.msg, "Reached maximum recursion limit for nested messages"));
	}
	idem_buf_reset(&t);
	nested_proto(&t, IDEM_SCHEMA_MAX_DEPTH + 1, &line, &col);
	snprintf(want, sizeof(want), "line %d:%d: nested deeper than the bound of %d levels", line,
	         col, IDEM_SCHEMA_MAX_DEPTH);
	schema_fails(t.data, NULL, 0, want);
	{
		const struct idem_pb_file deep[] = { { "a.proto", t.data, t.len } };
		char want_dep[200];

		snprintf(want_dep, sizeof(want_dep), "import \"a.proto\": %s", want);
		schema_fails("syntax = \"proto3\"; import \"a.proto\"; message M {}", deep, 1,
		             want_dep);
	}
	for (int levels = 20000; levels <= 200000; levels *= 10) {
		idem_buf_reset(&t);
		nested_proto(&t, levels, &line, &col);
		schema_fails(t.data, NULL, 0,
		             "line 66:13: nested deeper than the bound of 64 levels");
	}

	/* Enums in messages, a oneof, an option's value in braces and in < >: all one nesting. */
	idem_buf_reset(&t);
	assert_int_equal(idem_buf_append_str(&t, "syntax = \"proto2\";"), IDEM_OK);
	for (int i = 0; i < IDEM_SCHEMA_MAX_DEPTH - 2; i++)
		assert_int_equal(idem_buf_printf(&t, "message M%d {", i), IDEM_OK);
	assert_int_equal(idem_buf_printf(&u, "%s message L { message K {", t.data), IDEM_OK);
	assert_int_equal(idem_buf_append_str(&t, "oneof o { int32 a = 1; } enum E { Z = 0; }"),
	                 IDEM_OK);
	for (int i = 0; i < IDEM_SCHEMA_MAX_DEPTH - 2; i++)
		assert_int_equal(idem_buf_append_str(&t, "}"), IDEM_OK);
	scan_ok(t.data);
	assert_int_equal(idem_buf_append_str(&u, "enum E { Z = 0; }"), IDEM_OK);
	snprintf(want, sizeof(want), "line 1:%d: nested deeper than the bound of %d levels",
	         (int)(strrchr(u.data, '{') - u.data) + 1, IDEM_SCHEMA_MAX_DEPTH);
	scan_fails(u.data, want);
	idem_buf_reset(&t);
	assert_int_equal(idem_buf_append_str(&t, "option (o) = { a"), IDEM_OK);
	for (int i = 0; i < IDEM_SCHEMA_MAX_DEPTH - 2; i++)
		assert_int_equal(idem_buf_append_str(&t, " <b"), IDEM_OK);
	scan_ok(t.data); /* the braces and 62 <: 63 */
	assert_int_equal(idem_buf_append_str(&t, " <b"), IDEM_OK);
	scan_ok(t.data);
	assert_int_equal(idem_buf_append_str(&t, " <b"), IDEM_OK);
	snprintf(want, sizeof(want), "line 1:%d: nested deeper than the bound of %d levels",
	         (int)(strrchr(t.data, '<') - t.data) + 1, IDEM_SCHEMA_MAX_DEPTH);
	scan_fails(t.data, want);

	/* Brackets in comments and strings do not count; in a string, neither do quotes escaped. */
	idem_buf_reset(&t);
	nested_proto(&t, IDEM_SCHEMA_MAX_DEPTH, &line, &col);
	assert_int_equal(idem_buf_append_str(&t, "// {{{{ \n/* {{{{\n{{{{ */ message S { optional "
	                                         "string s = 1 [default = \"{{\\\"{{{\"]; }"
	                                         "message Q { string q = 1 [(o) = '<\\'<<']; }"),
	                 IDEM_OK);
	scan_ok(t.data);
	/* Closing brackets in a string, in a comment, or that match no open one, close nothing. */
	idem_buf_reset(&t);
	for (int i = 0; i < IDEM_SCHEMA_MAX_DEPTH; i++)
		assert_int_equal(idem_buf_append_str(&t, "{ \"}\" /* } */ ) > ]\n"), IDEM_OK);
	assert_int_equal(idem_buf_append_str(&t, "{"), IDEM_OK);
	snprintf(want, sizeof(want), "line %d:1: nested deeper than the bound of %d levels",
	         IDEM_SCHEMA_MAX_DEPTH + 1, IDEM_SCHEMA_MAX_DEPTH);
	scan_fails(t.data, want);

	/* A NUL byte ends a string and a comment, as in libprotobuf's tokenizer: what follows
	 * counts. */
	{
		static const char nul_string[] = "'x\0{{{";
		static const char nul_line[] = "// x\0{{{";
		static const char nul_block[] = "/* x\0*/{{{";
		idem_error err = { 0 };

		idem_buf_reset(&t);
		for (int i = 0; i < IDEM_SCHEMA_MAX_DEPTH - 2; i++)
			assert_int_equal(idem_buf_append_str(&t, "{"), IDEM_OK);
		assert_int_equal(idem_buf_append(&t, nul_string, sizeof(nul_string) - 1), IDEM_OK);
		assert_int_equal(idem_pb_scan(t.data, t.len, &err), IDEM_ERR_INVALID);
		assert_non_null(strstr(err.msg, "nested deeper than the bound of 64 levels"));
		t.len = IDEM_SCHEMA_MAX_DEPTH - 2;
		assert_int_equal(idem_buf_append(&t, nul_line, sizeof(nul_line) - 1), IDEM_OK);
		assert_int_equal(idem_pb_scan(t.data, t.len, &err), IDEM_ERR_INVALID);
		t.len = IDEM_SCHEMA_MAX_DEPTH - 2;
		assert_int_equal(idem_buf_append(&t, nul_block, sizeof(nul_block) - 1), IDEM_OK);
		assert_int_equal(idem_pb_scan(t.data, t.len, &err), IDEM_ERR_INVALID);
		t.len = IDEM_SCHEMA_MAX_DEPTH - 2;
		assert_int_equal(idem_buf_append_str(&t, "/* {{{ */ '{{{' // {{{"), IDEM_OK);
		assert_int_equal(idem_pb_scan(t.data, t.len, &err), IDEM_OK);
	}

	/* Definitions: exactly the bound builds; one more is refused where it starts. */
	idem_buf_reset(&t);
	assert_int_equal(idem_buf_append_str(&t, "syntax = \"proto3\";\n"), IDEM_OK);
	for (int i = 0; i < IDEM_SCHEMA_MAX_DEFINITIONS / 2; i++)
		assert_int_equal(
		        idem_buf_printf(&t, "message M%d { oneof o { int32 a = 1; } }\n", i),
		        IDEM_OK);
	s = schema_of("many.proto", t.data, NULL, 0);
	idem_pb_schema_unref(s);
	assert_int_equal(idem_buf_append_str(&t, "enum E { Z = 0; }\n"), IDEM_OK);
	snprintf(
	        want, sizeof(want),
	        "line %d:1: more definitions (messages, enums, groups, oneofs, services, extends) than the bound of %d",
	        IDEM_SCHEMA_MAX_DEFINITIONS / 2 + 2, IDEM_SCHEMA_MAX_DEFINITIONS);
	schema_fails(t.data, NULL, 0, want);

	/* Imports: exactly the bound passes the scan; one more is refused. */
	idem_buf_reset(&t);
	assert_int_equal(idem_buf_append_str(&t, "syntax = \"proto3\";\n"), IDEM_OK);
	for (int i = 0; i < IDEM_SCHEMA_MAX_IMPORTS; i++)
		assert_int_equal(idem_buf_printf(&t, "import \"f%d.proto\";\n", i), IDEM_OK);
	scan_ok(t.data);
	assert_int_equal(idem_buf_append_str(&t, "import public \"g.proto\";\n"), IDEM_OK);
	snprintf(want, sizeof(want), "line %d:1: more imports than the bound of %d",
	         IDEM_SCHEMA_MAX_IMPORTS + 2, IDEM_SCHEMA_MAX_IMPORTS);
	scan_fails(t.data, want);
	idem_buf_done(&u);
	idem_buf_done(&t);
}

/* Hostile bodies, refused before libprotobuf reads them, saying where. */
static void test_hostile(void **state)
{
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	/* i32 (field 2, varint) of 11 bytes */
	static const uint8_t long_varint[] = { 0x00, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff,
		                               0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };
	/* s (field 1) of length 1000, 2 bytes there */
	static const uint8_t long_len[] = { 0x00, 0x0a, 0xe8, 0x07, 'a', 'b' };
	/* items[0] (field 19) of 3 bytes holding sku (field 1) of length 5 */
	static const uint8_t past_msg[] = {
		0x00, 0x9a, 0x01, 0x03, 0x0a, 0x05, 'a', 'b', 'c', 'd'
	};
	/* field 1 as a start group, an end group, wire types 6 and 7 */
	static const uint8_t group3[] = { 0x00, 0x0b, 0x0c };
	static const uint8_t group4[] = { 0x00, 0x0c };
	static const uint8_t wt6[] = { 0x00, 0x0e, 0x00 };
	static const uint8_t wt7[] = { 0x00, 0x10, 0x01, 0x0f };
	/* field 0 (varint) */
	static const uint8_t field0[] = { 0x00, 0x00, 0x01 };
	/* i32 (field 2) length-delimited, s (field 1) as a varint, fl (field 12) as fixed64 */
	static const uint8_t wrong_i32[] = { 0x00, 0x12, 0x01, 0x05 };
	static const uint8_t wrong_s[] = { 0x00, 0x08, 0x01 };
	static const uint8_t wrong_fl[] = { 0x00, 0x61, 1, 2, 3, 4, 5, 6, 7, 8 };
	/* s = "a\xffb": not UTF-8 */
	static const uint8_t bad_utf8[] = { 0x00, 0x0a, 0x03, 'a', 0xff, 'b' };
	/* s = a surrogate (ED A0 80) */
	static const uint8_t surrogate[] = { 0x00, 0x0a, 0x03, 0xed, 0xa0, 0x80 };
	/* by_id (field 23) { key = 7, value = Item { sku = "\xff" } } */
	static const uint8_t bad_in_map[] = { 0x00, 0xba, 0x01, 0x07, 0x08, 0x07,
		                              0x12, 0x03, 0x0a, 0x01, 0xff };
	/* counts (field 22) { key = "k\xff" }: the key itself */
	static const uint8_t bad_key[] = { 0x00, 0xb2, 0x01, 0x04, 0x0a, 0x02, 'k', 0xff };
	/* f32 (field 8, fixed32) with 2 bytes of 4 */
	static const uint8_t short_fixed[] = { 0x00, 0x45, 0x01, 0x02 };
	/* a tag cut short */
	static const uint8_t short_tag[] = { 0x00, 0x10, 0x01, 0x80 };
	/* a tag of 6 bytes; a tag beyond 32 bits */
	static const uint8_t long_tag[] = { 0x00, 0x88, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01 };
	static const uint8_t big_tag[] = { 0x00, 0xf8, 0xff, 0xff, 0xff, 0x1f, 0x01 };
	/* nums (field 20, int32) packed, the second varint cut short by the field's end; i32 */
	static const uint8_t short_packed[] = { 0x00, 0xa2, 0x01, 0x02, 0x01, 0x80, 0x10, 0x01 };
	/* reals (field 38, double) packed in 7 bytes */
	static const uint8_t odd_packed[] = { 0x00, 0xb2, 0x02, 0x07, 1, 2, 3, 4, 5, 6, 7 };
	/* an unknown field 99 of length 9, 1 byte there */
	static const uint8_t unknown_len[] = { 0x00, 0x9a, 0x06, 0x09, 0x00 };
	struct enc m = { .n = 0 }, it;

	(void)state;
	decode_fails(dec, s, long_varint, sizeof(long_varint),
	             "schema id 7: at byte 7 (/i32): varint is longer than 10 bytes");
	decode_fails(
	        dec, s, long_len, sizeof(long_len),
	        "schema id 7: at byte 7 (/s): length 1000 runs past the end of the value (11 bytes)");
	decode_fails(
	        dec, s, past_msg, sizeof(past_msg),
	        "schema id 7: at byte 10 (/items/0/sku): length 5 runs past the end of its message (at byte 12)");
	decode_fails(
	        dec, s, group3, sizeof(group3),
	        "schema id 7: at byte 6: group wire type (field 1), which idemd does not read");
	decode_fails(dec, s, group4, sizeof(group4),
	             "schema id 7: at byte 6: end group (field 1) without its start");
	decode_fails(dec, s, wt6, sizeof(wt6),
	             "schema id 7: at byte 6: wire type 6 (field 1) is not valid");
	decode_fails(dec, s, wt7, sizeof(wt7),
	             "schema id 7: at byte 8: wire type 7 (field 1) is not valid");
	decode_fails(dec, s, field0, sizeof(field0), "schema id 7: at byte 6: field number 0");
	decode_fails(
	        dec, s, wrong_i32, sizeof(wrong_i32),
	        "schema id 7: at byte 6 (/i32): wire type 2 is not that of an int32 field (0)");
	decode_fails(dec, s, wrong_s, sizeof(wrong_s),
	             "schema id 7: at byte 6 (/s): wire type 0 is not that of a string field (2)");
	decode_fails(dec, s, wrong_fl, sizeof(wrong_fl),
	             "schema id 7: at byte 6 (/fl): wire type 1 is not that of a float field (5)");
	decode_fails(dec, s, bad_utf8, sizeof(bad_utf8),
	             "schema id 7: at byte 9 (/s): string is not valid UTF-8");
	decode_fails(dec, s, surrogate, sizeof(surrogate),
	             "schema id 7: at byte 8 (/s): string is not valid UTF-8");
	decode_fails(dec, s, bad_in_map, sizeof(bad_in_map),
	             "schema id 7: at byte 15 (/by_id/7/sku): string is not valid UTF-8");
	decode_fails(dec, s, bad_key, sizeof(bad_key),
	             "schema id 7: at byte 12 (/counts/k?): string is not valid UTF-8");
	decode_fails(
	        dec, s, short_fixed, sizeof(short_fixed),
	        "schema id 7: at byte 7 (/f32): fixed32 runs past the end of the value (9 bytes)");
	decode_fails(dec, s, short_tag, sizeof(short_tag),
	             "schema id 7: at byte 8: tag runs past the end of the value (9 bytes)");
	decode_fails(dec, s, long_tag, sizeof(long_tag),
	             "schema id 7: at byte 6: tag is more than 32 bits");
	decode_fails(dec, s, big_tag, sizeof(big_tag),
	             "schema id 7: at byte 6: tag is more than 32 bits");
	decode_fails(
	        dec, s, short_packed, sizeof(short_packed),
	        "schema id 7: at byte 10 (/nums/1): varint runs past the end of the packed field (at byte 11)");
	decode_fails(dec, s, odd_packed, sizeof(odd_packed),
	             "schema id 7: at byte 9 (/reals): packed length 7 is not a multiple of 8");
	decode_fails(dec, s, unknown_len, sizeof(unknown_len),
	             "schema id 7: at byte 8: length 9 runs past the end of the value (10 bytes)");

	/* The example of the header: the third item's sku. */
	put_byte(&m, 0);
	for (int i = 0; i < 2; i++) {
		it = item("ok", i);
		put_mf(&m, 19, &it);
	}
	put_tag(&m, 19, 2);
	put_varint(&m, 4);
	put_raw(&m, "\x0a\xe8\x07z", 4);
	decode_fails(
	        dec, s, m.b, m.n,
	        "schema id 7: at byte 28 (/items/2/sku): length 1000 runs past the end of the value (31 bytes)");

	/* A failed decode leaves nothing to read. */
	read_fails(dec, "/s", false, IDEM_ERR_INVALID, "no Protobuf message is decoded");
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s);
}

/* Node { next = Node { next = ... } }, @levels messages deep (the root is 1). */
static void nest(struct enc *m, int levels)
{
	struct enc a = { .n = 0 }, b;

	put_vf(&a, 2, 42);
	for (int i = 1; i < levels; i++) {
		b.n = 0;
		put_mf(&b, 1, &a);
		a = b;
	}
	m->n = 0;
	put_raw(m, "\x02\x04", 2); /* [2]: Node */
	put_raw(m, a.b, a.n);
}

static void test_depth(void **state)
{
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	struct enc m;
	char want[1024], ptr[1024];
	size_t n;

	(void)state;
	nest(&m, IDEM_PB_MAX_DEPTH);
	decode_ok(dec, s, m.b, m.n);
	for (n = 0; n < (IDEM_PB_MAX_DEPTH - 1) * 5; n += 5)
		memcpy(ptr + n, "/next", 5);
	memcpy(ptr + n, "/v", 3);
	text_is(dec, ptr, "42");
	nest(&m, IDEM_PB_MAX_DEPTH + 1);
	/*
	 * The tag of the 64th level's field next: after 2 index bytes, the root's tag and length
	 * (3 bytes: a length of 128) and 62 levels' tag and length (2 bytes each).
	 */
	n = (size_t)snprintf(want, sizeof(want), "schema id 7: at byte %d (", AT + 2 + 3 + 62 * 2);
	for (int i = 0; i < IDEM_PB_MAX_DEPTH; i++)
		n += (size_t)snprintf(want + n, sizeof(want) - n, "/next");
	snprintf(want + n, sizeof(want) - n, "): nested deeper than 64 levels");
	decode_fails(dec, s, m.b, m.n, want);
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s);
}

/* A proto2 string that is not UTF-8: libprotobuf takes it, so does idemd, but not as JSON. */
static void test_proto2_strings(void **state)
{
	idem_pb_schema *s = schema_of("legacy.proto", legacy_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	struct enc m = { .n = 0 };
	char path[] = "/tmp/test_idem_protobuf.XXXXXX";
	int fd = mkstemp(path), saved = dup(2);

	(void)state;
	assert_true(fd >= 0 && saved >= 0);
	put_lf(&m, 1, "a\xff", 2);
	put_vf(&m, 4, 3);
	put_lf(&m, 5, "\x01\x02", 2); /* vals, packed though proto2 does not pack by default */
	/* libprotobuf complains of the string as it parses and serializes it: not on stderr. */
	assert_int_equal(dup2(fd, 2), 2);
	decode0(dec, s, &m);
	text_is(dec, "/name", "a\xff");
	read_fails(dec, "", false, IDEM_ERR_KEY, "a string in it is not valid UTF-8");
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	assert_int_equal(lseek(fd, 0, SEEK_END), 0);
	close(fd);
	unlink(path);
	text_is(dec, "/vals", "[1,2]");
	text_is(dec, "/id", "3");
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s);
}

/* A message written with v2 of a schema (fields added) reads the same with v1. */
static void test_schema_versions(void **state)
{
	static const char v1[] = "syntax = \"proto3\";\n"
	                         "package shop;\n"
	                         "message Order {\n"
	                         "  string id = 1;\n"
	                         "  int64 amount = 2;\n"
	                         "}\n";
	static const char v2[] = "syntax = \"proto3\";\n"
	                         "package shop;\n"
	                         "message Order {\n"
	                         "  string id = 1;\n"
	                         "  repeated string notes = 3;\n"
	                         "  int64 amount = 2;\n"
	                         "  Order parent = 4;\n"
	                         "  fixed64 stamp = 5;\n"
	                         "}\n";
	idem_pb_schema *s1 = schema_of("order.proto", v1, NULL, 0);
	idem_pb_schema *s2 = schema_of("order.proto", v2, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	struct enc m1 = { .n = 0 }, m2 = { .n = 0 }, parent = { .n = 0 };

	(void)state;
	put_sf(&m1, 1, "o-9");
	put_vf(&m1, 2, 1999);
	put_sf(&m2, 3, "gift");
	put_sf(&m2, 1, "o-9");
	put_sf(&parent, 1, "o-8");
	put_mf(&m2, 4, &parent);
	put_vf(&m2, 2, 1999);
	put_tag(&m2, 5, 1);
	put_raw(&m2, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
	decode0(dec, s2, &m2);
	text_is(dec, "/parent/id", "o-8");
	decode0(dec, s1, &m2);
	text_is(dec, "/id", "o-9");
	text_is(dec, "/amount", "1999");
	absent_is(dec, "/notes", "not found in value");
	text_is(dec, "", "{\"id\":\"o-9\",\"amount\":\"1999\"}");
	decode0(dec, s1, &m1);
	text_is(dec, "", "{\"id\":\"o-9\",\"amount\":\"1999\"}");
	idem_pb_dec_reset(dec);
	idem_pb_dec_free(dec);
	idem_pb_schema_unref(s1);
	idem_pb_schema_unref(s2);
}

static void test_pointers_and_refs(void **state)
{
	idem_pb_schema *s = schema_of("shop.proto", shop_proto, NULL, 0);
	idem_pb_dec *dec = idem_pb_dec_new();
	struct enc m = { .n = 0 };

	(void)state;
	put_sf(&m, 1, "x");
	decode0(dec, s, &m);
	read_fails(dec, "s", false, IDEM_ERR_INVALID, "'s' is not a JSON pointer");
	read_fails(dec, "/s~2", false, IDEM_ERR_INVALID, "'/s~2' is not a JSON pointer");
	absent_is(dec, "/", "not found in value");
	absent_is(dec, "/s/", "not found in value");
	assert_ptr_equal(idem_pb_schema_ref(s), s);
	idem_pb_schema_unref(s);
	idem_pb_dec_reset(dec);
	read_fails(dec, "/s", false, IDEM_ERR_INVALID, "no Protobuf message is decoded");
	decode0(dec, s, &m);
	text_is(dec, "/s", "x");
	idem_pb_dec_free(dec);
	idem_pb_dec_free(NULL);
	idem_pb_schema_unref(s);
	idem_pb_schema_unref(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scalars),
		cmocka_unit_test(test_reals_and_enums),
		cmocka_unit_test(test_well_known_types),
		cmocka_unit_test(test_empty_values),
		cmocka_unit_test(test_times),
		cmocka_unit_test(test_nested_and_repeated),
		cmocka_unit_test(test_whole_message),
		cmocka_unit_test(test_maps),
		cmocka_unit_test(test_presence),
		cmocka_unit_test(test_message_indexes),
		cmocka_unit_test(test_imports),
		cmocka_unit_test(test_bad_schemas),
		cmocka_unit_test(test_schema_bounds),
		cmocka_unit_test(test_hostile),
		cmocka_unit_test(test_depth),
		cmocka_unit_test(test_proto2_strings),
		cmocka_unit_test(test_schema_versions),
		cmocka_unit_test(test_pointers_and_refs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
