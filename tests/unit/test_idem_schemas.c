/*
 * test_idem_schemas.c - the schemas of a configuration as fields ask for them: a JSON schema
 * (schemaType JSON) is checked to be JSON and kept as its type only, and an id whose schema is
 * of another type than the field reads (an AVRO id for a json-schema route's json: fields, a
 * JSON id for avro: fields) cannot be read, saying so. The registry itself (HTTP, cache, single
 * flight) is test_idem_registry.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "idem_avro.h"
#include "idem_jsonschema.h"
#include "idem_protobuf.h"
#include "idem_schemas.h"
/* cmocka.h needs the headers above. */
#include <cmocka.h>

/* lib/idem_schemas.c, IDEM_TESTABLE */
idem_status idem__schemas_parse_json(const char *text, size_t len, void **ret_obj, char *why,
                                     size_t whylen);
idem_status idem__schemas_parse_avro(const char *text, size_t len, void **ret_obj, char *why,
                                     size_t whylen);
enum idem_schema_answer idem__schemas_answer(int timeout_ms, enum idem_registry_answer answer,
                                             void *obj, int32_t id, enum idem_schema_type type,
                                             void **ret_schema, char *why, size_t whylen,
                                             int *ret_retry_ms);

idem_status idem__schemas_parse_protobuf(const char *text, size_t len, int32_t id,
                                         const struct idem_pb_file *deps, size_t n_deps,
                                         void **ret_obj, char *why, size_t whylen);
void *idem__schemas_ref(void *obj);
void idem__schemas_unref(void *obj);

static void *ref(void *obj)
{
	return idem__schemas_ref(obj);
}

static void unref(void *obj)
{
	idem__schemas_unref(obj);
}

static idem_status parse_json(const char *text, void **ret_obj, char *why, size_t whylen)
{
	return idem__schemas_parse_json(text, strlen(text), ret_obj, why, whylen);
}

static void test_parse_json(void **state)
{
	void *a = NULL, *b = NULL, *c = NULL;
	char why[128] = "";

	(void)state;
	assert_int_equal(parse_json("{\"type\":\"object\",\"properties\":{\"payment_id\":"
	                            "{\"type\":\"string\"}}}",
	                            &a, why, sizeof(why)),
	                 IDEM_OK);
	assert_non_null(a);
	assert_int_equal(parse_json("true", &b, why, sizeof(why)), IDEM_OK);
	assert_int_equal(parse_json(" {} ", &c, why, sizeof(why)), IDEM_OK);
	unref(a);
	unref(b);
	unref(c);

	c = NULL;
	assert_int_equal(parse_json("{\"type\":", &c, why, sizeof(why)), IDEM_ERR_INVALID);
	assert_null(c);
	assert_non_null(strstr(why, "JSON schema is not JSON: "));
	assert_int_equal(parse_json("[1, 2]", &c, why, sizeof(why)), IDEM_ERR_INVALID);
	assert_string_equal(why, "JSON schema is neither an object nor a boolean");
	assert_int_equal(parse_json("\"string\"", &c, why, sizeof(why)), IDEM_ERR_INVALID);
	assert_null(c);
}

static void test_answer_types(void **state)
{
	static const char avro_text[] = "{\"type\":\"record\",\"name\":\"p\",\"fields\":"
	                                "[{\"name\":\"id\",\"type\":\"string\"}]}";
	void *avro = NULL, *got = NULL;
	void *json = NULL;
	char why[128] = "";
	int retry_ms = 0;

	(void)state;
	assert_int_equal(parse_json("{}", &json, why, sizeof(why)), IDEM_OK);
	assert_int_equal(
	        idem__schemas_parse_avro(avro_text, sizeof(avro_text) - 1, &avro, why, sizeof(why)),
	        IDEM_OK);

	/* Each type read by its own fields. */
	assert_int_equal(idem__schemas_answer(1000, IDEM_REGISTRY_OK, ref(json), 7,
	                                      IDEM_SCHEMA_TYPE_JSON, NULL, why, sizeof(why),
	                                      &retry_ms),
	                 IDEM_SCHEMA_OK);
	assert_int_equal(idem__schemas_answer(1000, IDEM_REGISTRY_OK, ref(avro), 3,
	                                      IDEM_SCHEMA_TYPE_AVRO, &got, why, sizeof(why),
	                                      &retry_ms),
	                 IDEM_SCHEMA_OK);
	/* The Avro schema itself, a reference of its own. */
	assert_non_null(got);
	assert_ptr_not_equal(got, avro);
	idem_avro_schema_unref(got);

	/* The other type: the message cannot be read, and the reference is let go. */
	assert_int_equal(idem__schemas_answer(1000, IDEM_REGISTRY_OK, ref(avro), 3,
	                                      IDEM_SCHEMA_TYPE_JSON, NULL, why, sizeof(why),
	                                      &retry_ms),
	                 IDEM_SCHEMA_UNKNOWN);
	assert_string_equal(why, "schema id 3 is AVRO, not JSON");
	got = NULL;
	assert_int_equal(idem__schemas_answer(1000, IDEM_REGISTRY_OK, ref(json), 7,
	                                      IDEM_SCHEMA_TYPE_AVRO, &got, why, sizeof(why),
	                                      &retry_ms),
	                 IDEM_SCHEMA_UNKNOWN);
	assert_string_equal(why, "schema id 7 is JSON, not AVRO");
	assert_null(got);

	/* The registry's other answers, whatever the type. */
	assert_int_equal(idem__schemas_answer(1000, IDEM_REGISTRY_UNKNOWN, NULL, 9,
	                                      IDEM_SCHEMA_TYPE_JSON, NULL, why, sizeof(why),
	                                      &retry_ms),
	                 IDEM_SCHEMA_UNKNOWN);
	assert_int_equal(idem__schemas_answer(1000, IDEM_REGISTRY_UNAVAILABLE, NULL, 9,
	                                      IDEM_SCHEMA_TYPE_JSON, NULL, why, sizeof(why),
	                                      &retry_ms),
	                 IDEM_SCHEMA_UNAVAILABLE);
	assert_int_equal(idem__schemas_answer(1000, IDEM_REGISTRY_PENDING, NULL, 9,
	                                      IDEM_SCHEMA_TYPE_JSON, NULL, why, sizeof(why),
	                                      &retry_ms),
	                 IDEM_SCHEMA_PENDING);
	assert_int_equal(retry_ms, 2000);

	/* The last references: nothing leaks (ASan). */
	unref(avro);
	unref(json);
}

/*
 * A Protobuf schema with an import from its references: parsed and kept with its type; read by
 * protobuf: fields as the schema itself (a reference of its own), by avro: fields not at all.
 */
static void test_protobuf(void **state)
{
	static const char money[] = "syntax = \"proto3\";\npackage common;\n"
	                            "message Money { string currency = 1; int64 units = 2; }\n";
	static const char order[] = "syntax = \"proto3\";\nimport \"common/money.proto\";\n"
	                            "message Order { string id = 1; common.Money total = 2; }\n";
	static const char broken[] = "syntax = \"proto3\";\nmessage Order { string id = 1 }\n";
	const struct idem_pb_file deps[] = { { "common/money.proto", money, sizeof(money) - 1 } };
	void *pb = NULL, *got = NULL;
	char why[256] = "";
	int retry_ms = 0;

	(void)state;
	assert_int_equal(idem__schemas_parse_protobuf(order, sizeof(order) - 1, 12, deps, 1, &pb,
	                                              why, sizeof(why)),
	                 IDEM_OK);
	assert_int_equal(idem__schemas_answer(1000, IDEM_REGISTRY_OK, ref(pb), 12,
	                                      IDEM_SCHEMA_TYPE_PROTOBUF, &got, why, sizeof(why),
	                                      &retry_ms),
	                 IDEM_SCHEMA_OK);
	assert_non_null(got);
	idem_pb_schema_unref(got);
	got = NULL;
	assert_int_equal(idem__schemas_answer(1000, IDEM_REGISTRY_OK, ref(pb), 12,
	                                      IDEM_SCHEMA_TYPE_AVRO, &got, why, sizeof(why),
	                                      &retry_ms),
	                 IDEM_SCHEMA_UNKNOWN);
	assert_string_equal(why, "schema id 12 is PROTOBUF, not AVRO");
	assert_null(got);
	unref(pb);

	/* Without the import, and with a syntax error: the id cannot be read, saying why. */
	pb = NULL;
	assert_int_equal(idem__schemas_parse_protobuf(order, sizeof(order) - 1, 13, NULL, 0, &pb,
	                                              why, sizeof(why)),
	                 IDEM_ERR_INVALID);
	assert_null(pb);
	assert_non_null(strstr(why, "common/money.proto"));
	assert_int_equal(idem__schemas_parse_protobuf(broken, sizeof(broken) - 1, 14, NULL, 0, &pb,
	                                              why, sizeof(why)),
	                 IDEM_ERR_INVALID);
	assert_null(pb);
	assert_non_null(strstr(why, "2:"));
}

/*
 * JSON schemas are compiled for the routes that validate: they get the schema (a reference of
 * their own); one idemd cannot check is kept, read by routes that do not validate, refused
 * (saying why) to those that do.
 */
static void test_json_validation(void **state)
{
	void *ok = NULL, *odd = NULL, *got = NULL;
	char why[256] = "";
	int retry_ms = 0;

	(void)state;
	assert_int_equal(
	        parse_json("{\"type\":\"object\",\"required\":[\"id\"]}", &ok, why, sizeof(why)),
	        IDEM_OK);
	assert_int_equal(idem__schemas_answer(1000, IDEM_REGISTRY_OK, ref(ok), 7,
	                                      IDEM_SCHEMA_TYPE_JSON, &got, why, sizeof(why),
	                                      &retry_ms),
	                 IDEM_SCHEMA_OK);
	assert_non_null(got);
	idem_jsonschema_unref(got);
	unref(ok);

	assert_int_equal(parse_json("{\"unevaluatedProperties\":false}", &odd, why, sizeof(why)),
	                 IDEM_OK);
	assert_int_equal(idem__schemas_answer(1000, IDEM_REGISTRY_OK, ref(odd), 8,
	                                      IDEM_SCHEMA_TYPE_JSON, NULL, why, sizeof(why),
	                                      &retry_ms),
	                 IDEM_SCHEMA_OK);
	got = NULL;
	assert_int_equal(idem__schemas_answer(1000, IDEM_REGISTRY_OK, ref(odd), 8,
	                                      IDEM_SCHEMA_TYPE_JSON, &got, why, sizeof(why),
	                                      &retry_ms),
	                 IDEM_SCHEMA_UNKNOWN);
	assert_null(got);
	assert_non_null(strstr(why, "schema id 8 cannot be checked: "));
	assert_non_null(strstr(why, "unevaluatedProperties"));
	unref(odd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_json),
		cmocka_unit_test(test_answer_types),
		cmocka_unit_test(test_protobuf),
		cmocka_unit_test(test_json_validation),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
