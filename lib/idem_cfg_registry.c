/*
 * idem_cfg_registry.c - the schema_registry section of the configuration (ARCHITECTURE.md,
 * "Avro"): where avro: fields find their schemas. A section of its own, beside idem_cfg.c,
 * which holds the others and the checks across sections.
 */
#include <stddef.h>
#include <strings.h>

#include "idem_cfg.h"
#include "idem_cfg_walk.h"
#include "idem_url.h"

static cfg_check_value_fn check_url;
static cfg_check_section_fn check_registry;

enum {
	REG_URL,
	REG_USERNAME,
	REG_PASSWORD_ENV,
	REG_PASSWORD_FILE,
	REG_TIMEOUT_MS,
	REG_ALLOW_INSECURE_AUTH,
	REG_N
};
static const char *const reg_bool_names[] = { "false", "true", NULL };
static const struct cfg_key registry_keys[] = {
	[REG_URL] = { .name = "url",
	              .type = CFG_STRING,
	              .required = true,
	              .off = offsetof(struct idem_cfg, registry_url),
	              .check = check_url },
	[REG_USERNAME] = { .name = "username",
	                   .type = CFG_STRING,
	                   .off = offsetof(struct idem_cfg, registry_username) },
	[REG_PASSWORD_ENV] = { .name = "password_env",
	                       .type = CFG_STRING,
	                       .off = offsetof(struct idem_cfg, registry_password_env) },
	[REG_PASSWORD_FILE] = { .name = "password_file",
	                        .type = CFG_STRING,
	                        .off = offsetof(struct idem_cfg, registry_password_file) },
	[REG_TIMEOUT_MS] = { .name = "timeout_ms",
	                     .type = CFG_INT,
	                     .def = 5000,
	                     .min = 100,
	                     .max = IDEM_CFG_REGISTRY_TIMEOUT_MAX_MS,
	                     .range_why =
	                             "at most half of the unit's WatchdogSec, so that a request "
	                             "hanging to its end never delays the watchdog's pings",
	                     .off = offsetof(struct idem_cfg, registry_timeout_ms) },
	[REG_ALLOW_INSECURE_AUTH] = { .name = "allow_insecure_auth",
	                              .type = CFG_ENUM,
	                              .off = offsetof(struct idem_cfg,
	                                              registry_allow_insecure_auth),
	                              .names = reg_bool_names },
};
_Static_assert(REG_N <= CFG_MAX_KEYS, "CFG_MAX_KEYS is too small");

const struct cfg_section idem__cfg_registry_section = { registry_keys, REG_N, check_registry };

/*
 * Read by the one URL reader the registry client uses too (idem_url.h): http:// or https://, a
 * host, no credentials (the URL is logged; they have settings of their own).
 */
static bool check_url(struct cfg_ctx *ctx, yaml_node_t *node, const char *path, const char *value)
{
	struct idem_url u;
	char why[600];

	if (idem_url_parse(value, &u, why, sizeof(why)) == IDEM_OK) {
		idem_url_done(&u);
		return true;
	}
	if (idem_url_has_credentials(value))
		idem__cfg_error(
		        ctx, node,
		        "invalid '%s': %s; set 'schema_registry.username' and 'schema_registry.password_env' or 'schema_registry.password_file' instead",
		        path, why);
	else
		idem__cfg_error(ctx, node, "invalid '%s': %s", path, why);
	return false;
}

static void check_registry(struct cfg_ctx *ctx, const struct cfg_slot *slots, void *target)
{
	bool has_pw = slots[REG_PASSWORD_ENV].key != NULL || slots[REG_PASSWORD_FILE].key != NULL;
	const struct idem_cfg *cfg = target;

	/* Basic authentication sends the password with every request, only base64'd: over
	 * plain HTTP anyone on the path reads it. */
	if (slots[REG_URL].ok && cfg->registry_url != NULL && slots[REG_USERNAME].key != NULL &&
	    slots[REG_ALLOW_INSECURE_AUTH].ok && !cfg->registry_allow_insecure_auth &&
	    strncasecmp(cfg->registry_url, "http://", 7) == 0)
		idem__cfg_error(
		        ctx, slots[REG_USERNAME].key,
		        "'schema_registry.username' over plain http:// would send the password readable to anyone on the path with every request; use an https:// url, or set 'schema_registry.allow_insecure_auth: true' for a registry reached over a trusted network only");
	if (slots[REG_PASSWORD_ENV].key != NULL && slots[REG_PASSWORD_FILE].key != NULL)
		idem__cfg_error(
		        ctx, slots[REG_PASSWORD_FILE].key,
		        "'schema_registry.password_env' and 'schema_registry.password_file' are mutually exclusive; set one of them");
	if (has_pw && slots[REG_USERNAME].key == NULL)
		idem__cfg_error(ctx,
		                slots[REG_PASSWORD_ENV].key != NULL ? slots[REG_PASSWORD_ENV].key
		                                                    : slots[REG_PASSWORD_FILE].key,
		                "a schema_registry password needs 'schema_registry.username'");
}
