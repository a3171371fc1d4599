/*
 * fuzz_jsonschema.c - libFuzzer target: JSON schemas compiled and documents checked
 * (idem_jsonschema.h).
 *
 * The input is a schema and a document separated by the first NUL byte (no NUL: the whole input
 * is the schema, checked against a few fixed documents). Whatever the bytes, nothing may crash,
 * leak or hit undefined behaviour, and:
 *   - compiling answers IDEM_OK or IDEM_ERR_INVALID with a message;
 *   - a check answers IDEM_OK or IDEM_ERR_KEY with a message that starts "at /" and names the
 *     schema's place (unless cut at the message's size), and holds no control character (it
 *     ends up in logs);
 *   - checking the same document twice gives the same answer (the compiled schema is only read).
 */
#include <json-c/json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idem_jsonschema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const fixed_docs[] = {
	"null",
	"0",
	"-1.5e300",
	"\"\"",
	"\"abc\"",
	"[]",
	"[1,\"a\",[null]]",
	"{}",
	"{\"a\":{\"b\":[1,2,{\"c\":\"x\"}]},\"n\":12345678901234567890}",
};

static void check_msg(const idem_error *err)
{
	const char *m = err->msg;

	if (strncmp(m, "at /", 4) != 0 ||
	    (strlen(m) < sizeof(err->msg) - 64 && strstr(m, "(schema /") == NULL))
		abort();
	for (; *m != '\0'; m++) {
		if ((unsigned char)*m < 0x20)
			abort();
	}
}

static void check_doc(const idem_jsonschema *s, json_object *doc)
{
	idem_error err, again;
	idem_status st, st2;

	memset(&err, 0, sizeof(err));
	memset(&again, 0, sizeof(again));
	st = idem_jsonschema_check(s, doc, &err);
	if (st != IDEM_OK && st != IDEM_ERR_KEY && st != IDEM_ERR_NOMEM)
		abort();
	if (st == IDEM_ERR_KEY)
		check_msg(&err);
	st2 = idem_jsonschema_check(s, doc, &again);
	if (st2 != st || (st == IDEM_ERR_KEY && strcmp(err.msg, again.msg) != 0))
		abort();
}

static json_object *parse(const char *text, size_t len)
{
	json_tokener *tok = json_tokener_new();
	json_object *doc;

	if (tok == NULL)
		return NULL;
	doc = json_tokener_parse_ex(tok, text, (int)len);
	if (json_tokener_get_error(tok) != json_tokener_success) {
		json_object_put(doc);
		doc = NULL;
	}
	json_tokener_free(tok);
	return doc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, '\0', size);
	size_t slen = nul != NULL ? (size_t)(nul - data) : size;
	idem_jsonschema *s = NULL;
	idem_error err;
	char *text;

	if (size > 65536)
		return 0;
	text = malloc(slen + 1);
	if (text == NULL)
		return 0;
	memcpy(text, data, slen);
	text[slen] = '\0';
	memset(&err, 0, sizeof(err));
	switch (idem_jsonschema_new(text, slen, &s, &err)) {
	case IDEM_OK:
		break;
	case IDEM_ERR_INVALID:
		if (err.msg[0] == '\0')
			abort();
		free(text);
		return 0;
	case IDEM_ERR_NOMEM:
		free(text);
		return 0;
	default:
		abort();
	}
	if (nul != NULL) {
		json_object *doc = parse((const char *)nul + 1, size - slen - 1);

		if (doc != NULL || (size - slen - 1 == 4 && memcmp(nul + 1, "null", 4) == 0))
			check_doc(s, doc);
		json_object_put(doc);
	} else {
		for (size_t i = 0; i < sizeof(fixed_docs) / sizeof(fixed_docs[0]); i++) {
			json_object *doc = json_tokener_parse(fixed_docs[i]);

			check_doc(s, doc);
			json_object_put(doc);
		}
	}
	idem_jsonschema_unref(s);
	free(text);
	return 0;
}
