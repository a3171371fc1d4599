/*
 * idem_cfg_ops.c - what is done with a configuration by its section tables besides walking a
 * file into it: setting the defaults, reading the file, freeing a configuration (idem__cfg_clear())
 * and comparing two (idem__cfg_diff(), for a reload). The second file of the walker; see
 * idem_cfg_walk.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_cfg_walk.h"

void idem__cfg_set_defaults(const struct cfg_section *sec, void *target)
{
	for (size_t i = 0; i < sec->n_keys; i++) {
		const struct cfg_key *key = &sec->keys[i];

		switch (key->type) {
		case CFG_INT:
			*(int *)idem__cfg_field(target, key->off) = (int)key->def;
			break;
		case CFG_SIZE:
			*(size_t *)idem__cfg_field(target, key->off) = (size_t)key->def;
			break;
		case CFG_DURATION:
			*(int64_t *)idem__cfg_field(target, key->off) = (int64_t)key->def;
			break;
		case CFG_ENUM:
			*(int *)idem__cfg_field(target, key->off) = (int)key->def;
			break;
		case CFG_SECTION:
			idem__cfg_set_defaults(key->sub, target);
			break;
		default:
			break;
		}
	}
}

/* Reading the file. */

static idem_status cfg_io_error(const char *path, const char *what, int errnum, char **ret_errors)
{
	struct idem_buf b = { 0 };

	if (idem_buf_printf(&b, "%s: error: %s: %s\n", path, what, strerror(errnum)) != IDEM_OK) {
		idem_buf_done(&b);
		return IDEM_ERR_NOMEM;
	}
	if (ret_errors != NULL)
		*ret_errors = b.data;
	else
		idem_buf_done(&b);
	return IDEM_ERR_IO;
}

idem_status idem__cfg_read(const char *path, size_t max, struct idem_buf *ret_buf,
                           char **ret_errors)
{
	struct idem_buf b = { 0 };
	idem_status r;
	FILE *f;

	f = fopen(path, "rb");
	if (f == NULL)
		return cfg_io_error(path, "cannot open configuration", errno, ret_errors);
	for (;;) {
		size_t n;

		if (b.len >= max) {
			r = cfg_io_error(path, "cannot read configuration", EFBIG, ret_errors);
			goto out_close;
		}
		if (idem_buf_reserve(&b, 65536) != IDEM_OK) {
			r = IDEM_ERR_NOMEM;
			goto out_close;
		}
		n = fread(b.data + b.len, 1, 65536, f);
		b.len += n;
		if (n < 65536) {
			if (ferror(f)) {
				r = cfg_io_error(path, "cannot read configuration", errno,
				                 ret_errors);
				goto out_close;
			}
			break;
		}
	}
	fclose(f);
	*ret_buf = b;
	return IDEM_OK;
out_close:
	fclose(f);
	idem_buf_done(&b);
	return r;
}

/* Freeing and comparing targets, driven by the same tables. */

/* Frees what item @j of list key @key's array @items holds. */
static void cfg_clear_item(const struct cfg_key *key, void *items, size_t j)
{
	switch (key->type) {
	case CFG_STRINGS:
		free(((char **)items)[j]);
		break;
	case CFG_PROPERTIES:
	case CFG_VALUES:
		key->conv->done((char *)items + j * key->conv->size);
		break;
	case CFG_LIST:
		idem__cfg_clear(key->sub, (char *)items + j * key->size);
		break;
	default:
		break;
	}
}

void idem__cfg_clear(const struct cfg_section *sec, void *target)
{
	for (size_t i = 0; i < sec->n_keys; i++) {
		const struct cfg_key *key = &sec->keys[i];
		/* The field: a char *, an array's pointer, or a .conv value (CFG_VALUE). */
		void **slot = idem__cfg_field(target, key->off);
		size_t *count = idem__cfg_field(target, key->n_off);

		switch (key->type) {
		case CFG_STRING:
			free(*slot);
			*slot = NULL;
			break;
		case CFG_VALUE:
			key->conv->done(slot);
			break;
		case CFG_SECTION:
			idem__cfg_clear(key->sub, target);
			break;
		case CFG_STRINGS:
		case CFG_PROPERTIES:
		case CFG_VALUES:
		case CFG_LIST:
			/* An array and its count: as many items as counted, some maybe unfilled. */
			for (size_t j = 0; *slot != NULL && j < *count; j++)
				cfg_clear_item(key, *slot, j);
			free(*slot);
			*slot = NULL;
			*count = 0;
			break;
		case CFG_INT:
		case CFG_SIZE:
		case CFG_DURATION:
		case CFG_ENUM:
			break;
		}
	}
}

/* Do the arrays of list key @key in @a and @b hold as many items, each equal? */
static bool cfg_items_eq(const struct cfg_key *key, const void *a, const void *b)
{
	const void *x = *(const void *const *)((const char *)a + key->off);
	const void *y = *(const void *const *)((const char *)b + key->off);
	size_t n = *(const size_t *)((const char *)a + key->n_off);

	if (n != *(const size_t *)((const char *)b + key->n_off))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (key->type == CFG_STRINGS) {
			if (!idem__cfg_str_eq(((char *const *)x)[i], ((char *const *)y)[i]))
				return false;
		} else if (!key->conv->eq((const char *)x + i * key->conv->size,
		                          (const char *)y + i * key->conv->size)) {
			return false;
		}
	}
	return true;
}

/*
 * Does @key hold the same value in @a and @b? @ret_value gets the value in @b as text for
 * the scalar types (pointing into @b or into @buf), NULL for the others.
 */
static bool cfg_key_eq(const struct cfg_key *key, const void *a, const void *b, char *buf,
                       size_t len, const char **ret_value)
{
	const void *x = (const char *)a + key->off, *y = (const char *)b + key->off;

	*ret_value = NULL;
	switch (key->type) {
	case CFG_STRING:
		*ret_value = *(char *const *)y;
		return idem__cfg_str_eq(*(char *const *)x, *(char *const *)y);
	case CFG_INT:
		snprintf(buf, len, "%d", *(const int *)y);
		*ret_value = buf;
		return *(const int *)x == *(const int *)y;
	case CFG_ENUM:
		*ret_value = key->names[*(const int *)y];
		return *(const int *)x == *(const int *)y;
	case CFG_SIZE:
		snprintf(buf, len, "%zu", *(const size_t *)y);
		*ret_value = buf;
		return *(const size_t *)x == *(const size_t *)y;
	case CFG_DURATION:
		snprintf(buf, len, "%llds", (long long)*(const int64_t *)y);
		*ret_value = buf;
		return *(const int64_t *)x == *(const int64_t *)y;
	case CFG_VALUE:
		return key->conv->eq(x, y);
	case CFG_STRINGS:
	case CFG_PROPERTIES:
	case CFG_VALUES:
		return cfg_items_eq(key, a, b);
	case CFG_SECTION:
	case CFG_LIST:
		break;
	}
	return true;
}

size_t idem__cfg_diff(const struct cfg_section *sec, const char *path, const void *a, const void *b,
                      cfg_change_fn *fn, void *arg)
{
	size_t changes = 0;

	for (size_t i = 0; i < sec->n_keys; i++) {
		const struct cfg_key *key = &sec->keys[i];
		char child[CFG_PATH_MAX], buf[64];
		const char *value;

		snprintf(child, sizeof(child), path[0] == '\0' ? "%s%s" : "%s.%s", path, key->name);
		if (key->type == CFG_SECTION) {
			changes += idem__cfg_diff(key->sub, child, a, b, fn, arg);
			continue;
		}
		if (key->type == CFG_LIST) {
			const char *la = *(char *const *)((const char *)a + key->off);
			const char *lb = *(char *const *)((const char *)b + key->off);
			size_t na = *(const size_t *)((const char *)a + key->n_off);
			size_t nb = *(const size_t *)((const char *)b + key->n_off);

			if (na == nb) {
				/* Same length: item by item, so the message names what changed. */
				for (size_t j = 0; j < na; j++) {
					char item[CFG_PATH_MAX + 24];

					snprintf(item, sizeof(item), "%s[%zu]", child, j);
					changes +=
					        idem__cfg_diff(key->sub, item, la + j * key->size,
					                       lb + j * key->size, fn, arg);
				}
				continue;
			}
			value = NULL;
		} else if (cfg_key_eq(key, a, b, buf, sizeof(buf), &value)) {
			continue;
		}
		if (fn != NULL)
			fn(child, value, key->reload, arg);
		changes++;
	}
	return changes;
}

bool idem__cfg_str_eq(const char *a, const char *b)
{
	return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}
