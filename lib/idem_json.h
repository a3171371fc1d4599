/*
 * idem_json.h - an allocation-free JSON scanner for the common case of json: fields.
 *
 * Business keys and handler parameters are mostly plain scalars of plain documents: a string
 * without escapes, a number, true or false. Parsing each message with json-c builds a tree
 * (an allocation per value) only to read two or three of them; this scanner reads the value in
 * one pass instead and finds the pointer's scalar on the way.
 *
 * It vouches only for documents in a narrow form, which json-c accepts and reads to the same
 * scalar: whitespace of space, tab, CR and LF; strings of valid UTF-8 without a backslash or a
 * control character; numbers in RFC 8259 form with at most 18 integer digits and, with a
 * fraction or an exponent, at most 2 exponent digits; nesting at most IDEM_JSON_DEPTH deep;
 * nothing after the value but whitespace. For anything else (not in that form, not found,
 * null, an object or an array, "-0", a name on the pointer's path given twice in one object)
 * it answers "not known" and the caller asks json-c, which stays the authority on what is
 * valid JSON and on every error message (idem_field_json.c; unit.json and fuzz_json check that both
 * readers give the same result).
 */
#ifndef IDEM_JSON_H
#define IDEM_JSON_H

#include <stdbool.h>
#include <stddef.h>

/* Deeper nesting is "not known" here (json-c's own limit in idem_field is higher). */
#define IDEM_JSON_DEPTH 32

/*
 * @brief Find the scalar at RFC 6901 pointer @ptr (syntax already checked: "" or "/..." with
 * escaped segments) in the JSON text @s[0..n).
 * @return true with @ret_p, @ret_n set to its text as json-c would give it (a string's content
 * without the quotes, a number's text, "true" or "false"); false when not known (see above).
 */
bool idem_json_scalar(const char *s, size_t n, const char *ptr, const char **ret_p, size_t *ret_n);

/* Members of a root object noted by idem_json_members_read(); beyond that, it answers -1. */
#define IDEM_JSON_MEMBERS 32

struct idem_json_member {
	const char *name; /* as in the document (no escapes: the narrow form has none) */
	size_t name_n;
	const char *text; /* its value's text, as idem_json_scalar() gives it */
	size_t text_n;
	bool scalar; /* a value idem_json_scalar() vouches for (not null, a container or -0) */
};

/*
 * One pass over a message's value for all its json: fields (a route reads several: the
 * business key and the parameters): the document checked once, and its root object's members
 * noted, so that each field named by a one-segment pointer ("/account") is a lookup among
 * them instead of another pass over the value.
 */
struct idem_json_members {
	bool plain;    /* the document is in the narrow form (whatever the pointer) */
	bool object;   /* ... and its root is an object */
	bool overflow; /* ... of more than IDEM_JSON_MEMBERS members */
	size_t n;
	struct idem_json_member m[IDEM_JSON_MEMBERS];
};

/*
 * @brief Read the JSON text @s[0..n) once into @ret, which points into @s.
 * @return ret->plain.
 */
bool idem_json_members_read(const char *s, size_t n, struct idem_json_members *ret);

/*
 * @brief idem_json_scalar() of the document @ms was read from, at pointer @ptr, without reading
 * it again.
 * @return 1 with @ret_p, @ret_n set, as idem_json_scalar() would; 0 where idem_json_scalar()
 * answers false; -1 when @ms cannot tell (a pointer of other than one segment, a root that is
 * not an object, or more members than were noted): ask idem_json_scalar().
 */
int idem_json_members_scalar(const struct idem_json_members *ms, const char *ptr,
                             const char **ret_p, size_t *ret_n);

#endif
