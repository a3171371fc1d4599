/*
 * idem_jsonschema_int.h - what the four files of idem_jsonschema share: idem_jsonschema.c (the
 * schema: text, draft, nodes, $refs, numbers), idem_jsonschema_keywords.c (the keywords of a
 * subschema), idem_jsonschema_pattern.c (patterns) and idem_jsonschema_check.c (checking
 * documents). See idem_jsonschema.c for who does what.
 */
#ifndef IDEM_JSONSCHEMA_INT_H
#define IDEM_JSONSCHEMA_INT_H

#include <json-c/json.h>
#include <locale.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "idem_jsonschema.h"

/* Bits of "type". */
#define JS_T_NULL    0x01u
#define JS_T_BOOLEAN 0x02u
#define JS_T_OBJECT  0x04u
#define JS_T_ARRAY   0x08u
#define JS_T_NUMBER  0x10u
#define JS_T_STRING  0x20u
#define JS_T_INTEGER 0x40u

/* A JSON number as json-c holds it: an int64, a uint64 beyond INT64_MAX, or a double. */
enum js_num_kind {
	JS_NUM_INT,
	JS_NUM_UINT,
	JS_NUM_DOUBLE,
};

struct js_num {
	enum js_num_kind kind;
	int64_t i;
	uint64_t u;
	double d;
};

/* A compiled pattern; src (the schema's text) only for messages. */
struct js_pattern {
	regex_t re;
	const char *src;
};

struct js_prop {
	const char *name; /* in the schema's json-c tree */
	struct js_node *node;
};

struct js_patprop {
	struct js_pattern *pat;
	struct js_node *node;
};

/* dependentRequired (names, an array of strings) or dependentSchemas (node). */
struct js_dep {
	const char *name;
	json_object *names;
	struct js_node *node;
};

/* An absent maximum count. */
#define JS_NO_MAX UINT64_MAX

/*
 * One subschema. Nodes are owned by the schema's node list, not by their parents: a $ref is a
 * pointer to another node, so the graph may have cycles.
 */
struct js_node {
	char *path;         /* RFC 6901 pointer into the schema, "" for the root */
	int boolean;        /* -1: an object schema; 0: the schema false; 1: true */
	unsigned types;     /* JS_T_*; 0: no "type" */
	json_object *konst; /* const (NULL is JSON null: see has_const) */
	bool has_const;
	json_object *enum_values; /* an array, or NULL */
	bool has_multiple, has_max, has_xmax, has_min, has_xmin;
	struct js_num multiple, max, xmax, min, xmin;
	uint64_t max_length, min_length;
	struct js_pattern *pattern;
	uint64_t max_items, min_items;
	bool unique;
	struct js_node **prefix; /* prefixItems, or draft-07's "items" array */
	size_t n_prefix;
	struct js_node *rest; /* the items after the prefix */
	struct js_node *contains;
	uint64_t min_contains, max_contains;
	uint64_t max_props, min_props;
	json_object *required; /* an array of strings, or NULL */
	struct js_prop *props; /* sorted by name (strcmp) */
	size_t n_props;
	struct js_patprop *patprops;
	size_t n_patprops;
	struct js_node *additional;
	struct js_node *names; /* propertyNames */
	struct js_dep *dep_required, *dep_schemas;
	size_t n_dep_required, n_dep_schemas;
	struct js_node **all_of, **any_of, **one_of;
	size_t n_all_of, n_any_of, n_one_of;
	struct js_node *not_, *if_, *then_, *else_;
	struct js_node *ref; /* the resolved target of $ref */
};

struct idem_jsonschema {
	atomic_int refs;
	json_object *json; /* the schema's tree: names and const/enum values point into it */
	struct js_node *root;
	struct js_node **nodes;
	size_t n_nodes, cap_nodes;
	struct js_pattern **patterns;
	size_t n_patterns, cap_patterns;
	locale_t loc; /* the C locale, for patterns; (locale_t)0 when there are none */
};

/*
 * Compiling (idem_jsonschema.c, idem_jsonschema_keywords.c).
 */

/* Drafts, as bits: which drafts a keyword belongs to, and which the schema is read by. */
#define D7    0x1u /* draft-07 (and -06, -04) */
#define D2019 0x2u
#define D2020 0x4u
#define DALL  (D7 | D2019 | D2020)

/* Room for a pointer, a pattern or a name in a message, escaped and cut. */
#define SHOW_PATH 200
#define SHOW_TEXT 80

struct pending_ref {
	struct js_node *node;
	const char *ref;
};

struct compiler {
	idem_jsonschema *s;
	idem_error *err;
	unsigned drafts;     /* the drafts the schema is read by */
	const char *root_id; /* the root's $id, or NULL */
	struct map_slot {
		json_object *key;
		struct js_node *node;
	} * map; /* the node of each subschema compiled, at the hash of its json-c object */
	size_t map_cap, map_n;
	struct pending_ref *refs; /* $refs to resolve once the tree is compiled */
	size_t n_refs, cap_refs;
};

/* @brief Fill c->err with IDEM_ERR_INVALID and "at PATH: what" (@path shown escaped, "/" for
 * the root). @returns IDEM_ERR_INVALID. */
idem_status idem__jsonschema_fail(struct compiler *c, const char *path, const char *fmt, ...)
        IDEM_PRINTF(3, 4);

/* @brief @s[0..@len) escaped for quotes (idem_esc()) and cut to fit @out. @returns @out. */
const char *idem__jsonschema_show(char *out, size_t outlen, const char *s, size_t len);

/*
 * @returns the pointer @path/@kw[/@name][/@index] (@name NULL: no name; @index SIZE_MAX: no
 * index), allocated; NULL on out of memory.
 */
char *idem__jsonschema_child_path(const char *path, const char *kw, const char *name, size_t index);

/*
 * @brief Compile the subschema @j at @path (which it owns from now on, even on failure),
 * @depth levels down, into *@ret_node, unless it was compiled already (then that node).
 */
idem_status idem__jsonschema_compile(struct compiler *c, json_object *j, char *path, int depth,
                                     struct js_node **ret_node);

/* @brief Read the keywords of the object schema @j into @n (idem_jsonschema_keywords.c). */
idem_status idem__jsonschema_compile_object(struct compiler *c, struct js_node *n, json_object *j,
                                            int depth);

/* The names of the JS_T_* bits, bit i named by [i] (idem_jsonschema_check.c). */
extern const char *const idem__jsonschema_types[7];

/*
 * Checking (idem_jsonschema_check.c).
 */

/* @brief @v (a json-c int or double) as a number. @returns false if it is not one. */
bool idem__jsonschema_num(json_object *v, struct js_num *ret_n);

/* @brief -1, 0 or 1 as @a is less than, equal to or greater than @b; 2 if either is NaN. */
int idem__jsonschema_num_cmp(const struct js_num *a, const struct js_num *b);

/*
 * @returns @p (an array of capacity *@cap elements of @size) with room for @n + 1 elements,
 * perhaps moved; NULL on out of memory (@p and *@cap are then unchanged).
 */
void *idem__jsonschema_grow(void *p, size_t *cap, size_t n, size_t size);

/*
 * @brief Translate the ECMA-262 pattern @src[0..@len) (NUL-terminated at @len, kept by the
 * caller as long as @s) and compile it into *@ret_pat, which @s owns (idem_jsonschema_pattern.c).
 * @returns IDEM_OK; IDEM_ERR_INVALID with why in @why[0..@whylen) ("lookahead '(?=' at offset
 * 0 is not one idemd can check"); IDEM_ERR_NOMEM.
 */
idem_status idem__jsonschema_pattern_new(idem_jsonschema *s, const char *src, size_t len,
                                         struct js_pattern **ret_pat, char *why, size_t whylen);

/*
 * @brief Whether @pat matches the NUL-terminated @str anywhere, in the locale @loc (the
 * schema's C locale).
 * @returns 1 if it does, 0 if not, -1 when regexec() ran out of memory.
 */
int idem__jsonschema_match(const struct js_pattern *pat, locale_t loc, const char *str);

#endif
