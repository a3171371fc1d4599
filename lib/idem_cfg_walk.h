/*
 * idem_cfg_walk.h - the schema-driven YAML walker behind idem_cfg (internal to libidem).
 *
 * A schema is a tree of tables (struct cfg_section), one per mapping, each key giving its
 * type, default, range and target field. The walker checks a libyaml document against it,
 * converts each value into the target struct, records every problem with its position and
 * goes on, so one run reports them all. The same tables drive freeing a target
 * (idem__cfg_clear()) and comparing two (idem__cfg_diff()). It knows no setting and no type of
 * idem_cfg's: idem_cfg.c holds the tables, the checks that need to know what a setting means,
 * the conversions of the value types the walker does not know (struct cfg_conv) and building
 * struct idem_cfg; the walker depends on none of it (idem_cfg sits above it).
 *
 * Aliases can make a small file name the same nodes many times ("billion laughs"). The schema
 * has a fixed depth, so the walk always ends, but its length is bounded by a visit budget
 * proportional to the size of the file as well.
 *
 * Not installed and not part of the library's contract: the types keep their short cfg_ names,
 * the functions with external linkage are idem__cfg_*.
 */
#ifndef IDEM_CFG_WALK_H
#define IDEM_CFG_WALK_H

#include <stdarg.h>
#include <yaml.h>

#include "idem_common.h"

#define CFG_MAX_KEYS    12 /* keys in the largest section table */
#define CFG_QUOTE_CHARS 64 /* characters of a user value shown in a message */
#define CFG_QUOTE_BUF   (CFG_QUOTE_CHARS * 4 + 8)
#define CFG_PATH_MAX    256

enum cfg_type {
	CFG_STRING,     /* char *, not empty; .check validates it further */
	CFG_INT,        /* int, min..max */
	CFG_SIZE,       /* size_t, min..max */
	CFG_DURATION,   /* int64_t seconds, min..max: "30d", "12h", "90m", "45s" or seconds */
	CFG_ENUM,       /* an int-sized enum, one of the key's .names (their index is the value) */
	CFG_STRINGS,    /* char ** and a size_t count: a non-empty list of .noun, each .check'ed */
	CFG_PROPERTIES, /* an array of .conv values and a size_t count: name: value, each
	                   .check_pair'ed, then made by .conv->pair */
	CFG_VALUE,      /* one .conv value, made from a string by .conv->parse */
	CFG_VALUES,     /* an array of .conv values and a size_t count: a list of strings, each
	                   made by .conv->parse */
	CFG_SECTION,    /* a mapping described by another table, filling the same target */
	CFG_LIST,       /* a non-empty sequence of .noun, each a mapping described by .sub and
	                   stored in an array of .size-byte items (.off) with a count (.n_off) */
};

/*
 * A value type the walker does not know (a template, a message field, a kafka property): how
 * the tables make one from the file's text, compare two and free one.
 */
struct cfg_conv {
	size_t size; /* bytes of one value; CFG_VALUES and CFG_PROPERTIES store arrays of them */
	/* CFG_VALUE, CFG_VALUES: @ret from @s. IDEM_OK, IDEM_ERR_NOMEM, or any other status with
	 * the reason in @why (reported as "invalid 'PATH': WHY"). */
	idem_status (*parse)(const char *s, void *ret, char *why, size_t len);
	/* CFG_PROPERTIES: @ret from a pair its .check_pair accepted. IDEM_OK or IDEM_ERR_NOMEM. */
	idem_status (*pair)(const char *name, const char *value, void *ret);
	bool (*eq)(const void *a, const void *b);
	/* Frees what one value holds (not the value itself); accepts a zeroed or half-made one. */
	void (*done)(void *v);
};

struct cfg_ctx;

/* Where a key was found in its mapping, and whether its value could be used. */
struct cfg_slot {
	yaml_node_t *key;
	yaml_node_t *value;
	bool ok; /* absent (the default applies) or usable */
};

/* A further check of one string value; reports its own error and returns false if bad. */
typedef bool cfg_check_value_fn(struct cfg_ctx *ctx, yaml_node_t *node, const char *path,
                                const char *value);
/* A further check of one CFG_PROPERTIES pair (@knode: @vnode); as above. */
typedef bool cfg_check_pair_fn(struct cfg_ctx *ctx, yaml_node_t *knode, yaml_node_t *vnode,
                               const char *name, const char *value);
/* Checks across the keys of a section, after they were walked. */
typedef void cfg_check_section_fn(struct cfg_ctx *ctx, const struct cfg_slot *slots, void *target);

struct cfg_section;

struct cfg_key {
	const char *name;
	enum cfg_type type;
	bool required;
	bool reload; /* the running daemon applies it on SIGHUP; anything else needs a restart */
	bool unique; /* CFG_STRING of a CFG_LIST item: no two items may hold the same value */
	long long def, min, max;
	const char *range_why; /* CFG_INT, CFG_SIZE: why the range, said with its error */
	size_t off;            /* where the value goes in the target struct */
	size_t n_off; /* CFG_STRINGS, CFG_PROPERTIES, CFG_VALUES, CFG_LIST: where the count goes */
	size_t size;  /* CFG_LIST: the size of one item */
	const char *noun;              /* CFG_STRINGS, CFG_LIST: what one item is, for messages */
	const struct cfg_section *sub; /* CFG_SECTION, CFG_LIST */
	cfg_check_value_fn *check;     /* CFG_STRING, CFG_STRINGS items: further validation */
	cfg_check_pair_fn *check_pair; /* CFG_PROPERTIES: validation of each pair */
	const char *const *names;      /* CFG_ENUM: the accepted words, NULL-terminated */
	const struct cfg_conv *conv;   /* CFG_PROPERTIES, CFG_VALUE, CFG_VALUES */
};

struct cfg_section {
	const struct cfg_key *keys;
	size_t n_keys;
	cfg_check_section_fn *check; /* runs after the keys, with their slots */
};

struct cfg_error_line {
	size_t line, col, seq; /* line 0: about the whole file */
	char *text;
};

/* One walk: the document, the errors so far, the budget. Zero it, then set name and user. */
struct cfg_ctx {
	const char *name; /* the file name in messages */
	yaml_document_t *doc;
	void *user; /* the caller's, for its check functions */
	struct cfg_error_line *errs;
	size_t n_errs, cap_errs;
	size_t visits, max_visits;
	bool overflow;
	bool nomem;
	char qbuf[4][CFG_QUOTE_BUF];
	unsigned qnext;
};

/* Names that point back into the file, for duplicate checks. */
struct cfg_name_ref {
	const char *name;
	size_t a, b; /* position in the file's lists: route, item */
	yaml_node_t *node;
};

/*
 * @brief Parse @buf (@len bytes) as one YAML document and walk it against @sec into @target,
 * whose defaults the caller has set. Problems are collected in @ctx (ctx->nomem when out of
 * memory); more than one document is a problem too.
 */
void idem__cfg_walk(struct cfg_ctx *ctx, const char *buf, size_t len, const struct cfg_section *sec,
                    void *target);

/* @brief Writes each key's default into @target, following CFG_SECTION keys. */
void idem__cfg_set_defaults(const struct cfg_section *sec, void *target);

/*
 * @brief Frees every value the walk may have stored in @target following @sec (CFG_SECTION and
 * CFG_LIST keys included), half-built ones too, and zeroes their fields; @target itself stays
 * the caller's. What the tables do not describe is the caller's to free.
 */
void idem__cfg_clear(const struct cfg_section *sec, void *target);

/* Called for one setting that differs: its dotted @path, @value as in struct idem_cfg_change. */
typedef void cfg_change_fn(const char *path, const char *value, bool reload, void *arg);

/*
 * @brief Compares @a and @b key by key following @sec (lists of the same length item by item,
 * "PATH[i]"; of different lengths, one change of the list), calling @fn (if not NULL) with
 * @arg for each difference, in table order. @path prefixes the keys ("" at the top level).
 * @returns the number of differences.
 */
size_t idem__cfg_diff(const struct cfg_section *sec, const char *path, const void *a, const void *b,
                      cfg_change_fn *fn, void *arg);

/*
 * @brief Reads the file @path (at most @max bytes) into @ret_buf (free with idem_buf_done()).
 * @param ret_errors on IDEM_ERR_IO, if not NULL: "PATH: error: cannot open configuration:
 *        REASON" (or "cannot read"), malloc'ed.
 * @returns IDEM_OK, IDEM_ERR_IO or IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem__cfg_read(const char *path, size_t max, struct idem_buf *ret_buf,
                                          char **ret_errors);

/* @brief strcmp() == 0 where either may be NULL (equal only if both are). */
bool idem__cfg_str_eq(const char *a, const char *b);

/*
 * @brief The outcome of a walk: IDEM_ERR_NOMEM if memory ran out, else IDEM_ERR_CONFIG if
 * problems were found (@ret_errors, if not NULL, then gets all of them in file order, one per
 * line, malloc'ed), else IDEM_OK.
 */
IDEM_NODISCARD idem_status idem__cfg_result(struct cfg_ctx *ctx, char **ret_errors);

/* @brief Frees what @ctx collected. */
void idem__cfg_ctx_done(struct cfg_ctx *ctx);

/* @brief Reports a problem at @node (1-based line:column), or about the whole file if NULL. */
void idem__cfg_error(struct cfg_ctx *ctx, const yaml_node_t *node, const char *fmt, ...)
        IDEM_PRINTF(3, 4);

/*
 * @brief A user value fit for a message: at most CFG_QUOTE_CHARS characters, control
 * characters escaped, so that one error stays one line. Valid until three more calls.
 */
const char *idem__cfg_qs(struct cfg_ctx *ctx, const char *s);

/* @brief The value node of @key in mapping @map (the first if repeated), or NULL. */
yaml_node_t *idem__cfg_map_get(struct cfg_ctx *ctx, yaml_node_t *map, const char *key);

/* @brief Item @i of sequence @seq, or NULL. */
yaml_node_t *idem__cfg_seq_get(struct cfg_ctx *ctx, yaml_node_t *seq, size_t i);

/* @brief strdup() that sets ctx->nomem on failure. */
char *idem__cfg_strdup(struct cfg_ctx *ctx, const char *s);

/* @brief The field at byte offset @off of @target. */
void *idem__cfg_field(void *target, size_t off);

/* @brief qsort() order of cfg_name_ref: by name, then by position in the file. */
int idem__cfg_name_ref_cmp(const void *x, const void *y);

/* @brief Is @name in @refs[0..n), sorted by idem__cfg_name_ref_cmp()? */
bool idem__cfg_name_ref_find(const struct cfg_name_ref *refs, size_t n, const char *name);

#endif
