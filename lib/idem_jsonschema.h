/*
 * idem_jsonschema.h - JSON Schema validation of JSON documents (json-c trees), for the values of
 * `value_format: json-schema` routes (idemd.yaml(5) JSON SCHEMA VALUES).
 *
 * Debian 12 has no C JSON Schema validator, so idemd has its own, over json-c. A schema is
 * compiled once (every keyword read, every $ref resolved, every pattern translated) and then
 * checks documents without reading its text again. Drafts: 2020-12, and the draft-07 forms that
 * Confluent's registry holds. The root's "$schema" chooses: a 2020-12 URL, draft 2020-12 only;
 * a draft-07, -06 or -04 URL, draft-07 only; none or another (2019-09), both, where they do not
 * conflict ("items" as an array is draft-07's tuple, "prefixItems" 2020-12's). Keywords of the
 * draft not chosen are not keywords, and so are ignored, as the specification says of every
 * unknown keyword ("x-foo", "connect.name", ...). In draft-07, keywords beside "$ref" are
 * ignored (that draft's rule); in the others they apply too.
 *
 * Checked: boolean schemas; type ("integer" takes 1.0), enum, const (JSON equality: numbers by
 * value, 1 == 1.0; objects whatever their key order); multipleOf (exact, in decimal: 0.3 is a
 * multiple of 0.1), maximum, exclusiveMaximum, minimum, exclusiveMinimum; maxLength, minLength
 * (in Unicode code points), pattern; maxItems, minItems, uniqueItems, items, prefixItems,
 * additionalItems, contains, minContains, maxContains; maxProperties, minProperties, required,
 * properties, patternProperties, additionalProperties, propertyNames, dependentRequired,
 * dependentSchemas, dependencies (an array or a schema); allOf, anyOf, oneOf, not,
 * if/then/else; $ref to the document itself ("#", "#/$defs/x", "#/definitions/x", any RFC 6901
 * pointer into it, %-escapes and ~0 ~1 decoded; "" or the root's "$id" before the '#'), $defs,
 * definitions.
 *
 * Accepted and ignored (annotations): $schema, $id (the root's), $comment, $vocabulary, title,
 * description, default, examples, readOnly, writeOnly, deprecated, contentEncoding,
 * contentMediaType, contentSchema, and format: an annotation in 2020-12, so "format": "email"
 * asserts nothing.
 *
 * Refused when compiled, naming the keyword and where: unevaluatedProperties,
 * unevaluatedItems, $dynamicRef, $dynamicAnchor, $recursiveRef, $recursiveAnchor, $anchor, a
 * "$ref" to an anchor ("#foo") or to another document (remote references), an "$id" below the
 * root, draft-04's boolean exclusiveMaximum/exclusiveMinimum, draft-03's divisibleBy, disallow
 * and extends, a keyword whose value is not of its kind, schemas nested deeper than
 * IDEM_JSONSCHEMA_MAX_DEPTH.
 *
 * Patterns are ECMA-262 regular expressions, translated to POSIX extended ones (regcomp()) where
 * the translation is faithful, and matched anywhere in the string (unanchored, as the
 * specification says), by code point, not byte: '.', classes and their negations take one
 * character whatever its UTF-8 length (they are translated to UTF-8 byte sequences and run in
 * the C locale, set per thread around each match, whatever the process's own). Supported:
 * literals and escapes (\t \n \v \f \r \cX \xHH \uHHHH \u{H...} and escaped punctuation), '.',
 * classes with ranges and negation, \d \D \w \W \s \S (ECMA's sets: \s takes the Unicode
 * spaces), ^ and $, * + ? {n} {n,} {n,m} (counts up to 1000), alternation, groups and (?:...)
 * as plain groups. Refused, naming it: lookahead and lookbehind, backreferences (\1, \k<name>),
 * named groups, lazy quantifiers, \b and \B, \p{...}, flags, \0, letter escapes ECMA-262 does
 * not define, repeats that would expand to over 20000 elements. A string holding a NUL
 * character (\u0000) is matched up to it.
 *
 * Numbers are json-c's: integers as 64-bit integers (exactly), others as doubles. json-c reads
 * an integer beyond 64 bits as the nearest 64-bit bound (100000000000000000000000 as
 * 18446744073709551615), and such a document is checked with that value.
 *
 * Thread safety: a compiled schema is read-only and may be shared by threads (reference counted
 * with atomics); checking allocates nothing shared.
 */
#ifndef IDEM_JSONSCHEMA_H
#define IDEM_JSONSCHEMA_H

#include "idem_common.h"

/*
 * Subschemas nested deeper than this are refused when compiled; a check deeper than this many
 * document levels or $refs in a row fails ("schema recursion deeper than 64").
 */
#define IDEM_JSONSCHEMA_MAX_DEPTH 64

typedef struct idem_jsonschema idem_jsonschema;

/*
 * @brief Compile the schema @text[0..@len) (NUL-terminated at @len: the registry's "schema"
 * string): a JSON object or boolean.
 * @ret_schema has one reference, the caller's.
 * @returns IDEM_OK; IDEM_ERR_INVALID with what and where in @err, the place an RFC 6901 pointer
 * into the schema ("/" for the root): "not JSON: unexpected character at byte 3", "at
 * /properties/id: 'type' must be a string or an array of strings", "at /properties/x: keyword
 * 'unevaluatedProperties' is not one idemd can check", "at /properties/code/pattern: '(?=a)'
 * cannot be read: lookahead '(?=' at offset 0 is not one idemd can check", "at
 * /properties/a/$ref: '#/$defs/nope' names nothing in the schema"; IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_jsonschema_new(const char *text, size_t len,
                                               idem_jsonschema **ret_schema, idem_error *err);

/* @brief Take a reference to @s. @returns @s. */
idem_jsonschema *idem_jsonschema_ref(idem_jsonschema *s);

/* @brief Drop a reference to @s, freeing it with the last. Accepts NULL. */
void idem_jsonschema_unref(idem_jsonschema *s);

/*
 * @brief Check the JSON document @doc against @s.
 * @param doc a json_object * (json-c; NULL is JSON null), passed as void * so that this header
 *        does not need json-c. Only read.
 * @returns IDEM_OK when it is valid. IDEM_ERR_KEY with the first failure in @err, naming the
 * place in the document and the subschema that refused it, both RFC 6901 pointers with "/" for
 * the root: "at /items/2/sku: 12 is not of type string (schema
 * /properties/items/items/properties/sku)", "at /: required property 'amount' is missing (schema
 * /)". Values are shown short: numbers as text, strings quoted and cut after about 40 bytes,
 * objects and arrays by their type name; property names, strings and pointers are escaped
 * (idem_esc()), so that a document cannot forge a log line. A check deeper than
 * IDEM_JSONSCHEMA_MAX_DEPTH document levels or $refs ({"$ref": "#"} refers to itself without
 * end) is IDEM_ERR_KEY too: "at /a: schema recursion deeper than 64 (schema /)".
 * IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_jsonschema_check(const idem_jsonschema *s, const void *doc,
                                                 idem_error *err);

#endif
