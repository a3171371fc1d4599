/*
 * idem_cfg_secrets.c - where the configuration's secrets come from (idemd.yaml(5) SECRETS): the
 * NAME_env and NAME_file forms of librdkafka's secret properties in kafka.properties, the
 * warning for a secret written in the file itself, and reading every secret once at start-up.
 * Part of the cfg module, beside idem_cfg.c (which calls the checks here from its tables).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_cfg.h"
#include "idem_cfg_int.h"
#include "idem_cfg_walk.h"

/*
 * librdkafka 2.0.2's properties that hold a secret of one line: each may be written NAME_env
 * (an environment variable's name) or NAME_file (a file whose first line is it) instead. Keys
 * are several lines of PEM, so ssl.key.pem has no such form: librdkafka reads
 * ssl.key.location itself, and a literal one draws the same warning as the others.
 */
static const char *const secret_props[] = {
	"sasl.password",
	"ssl.key.password",
	"ssl.keystore.password",
	"sasl.oauthbearer.client.secret",
};

/* What to use instead of a secret written literally; NULL: @name holds none. */
static const char *literal_advice(const char *name)
{
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(secret_props); i++) {
		if (strcmp(name, secret_props[i]) == 0)
			return "_file";
	}
	if (strcmp(name, "ssl.key.pem") == 0)
		return "ssl.key.location";
	return NULL;
}

size_t idem_cfg_kafka_secret_ref(const char *name, bool *ret_file)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < IDEM_ARRAY_SIZE(secret_props); i++) {
		size_t k = strlen(secret_props[i]);

		if (n <= k || strncmp(name, secret_props[i], k) != 0)
			continue;
		if (strcmp(name + k, "_env") == 0 || strcmp(name + k, "_file") == 0) {
			*ret_file = name[k + 1] == 'f';
			return k;
		}
	}
	return 0;
}

static bool env_name_valid(const char *s)
{
	if (s[0] == '\0' || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (; *s != '\0'; s++) {
		if (!(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
		      (*s >= '0' && *s <= '9')))
			return false;
	}
	return true;
}

bool idem__cfg_check_kafka_secret(struct cfg_ctx *ctx, yaml_node_t *vnode, const char *name,
                                  const char *value, bool *ret_ok)
{
	bool file;

	if (idem_cfg_kafka_secret_ref(name, &file) == 0)
		return false;
	*ret_ok = true;
	if (value[0] == '\0') {
		idem__cfg_error(ctx, vnode, "'kafka.properties.%s' is empty; name %s", name,
		                file ? "a file" : "an environment variable");
		*ret_ok = false;
	} else if (!file && !env_name_valid(value)) {
		idem__cfg_error(
		        ctx, vnode,
		        "invalid 'kafka.properties.%s': '%s' is not an environment variable name (letters, digits and '_', not starting with a digit)",
		        name, idem__cfg_qs(ctx, value));
		*ret_ok = false;
	}
	return true;
}

void idem__cfg_check_kafka_secrets(struct cfg_ctx *ctx, yaml_node_t *props)
{
	const char *seen[IDEM_ARRAY_SIZE(secret_props)] = { NULL };

	if (props == NULL || props->type != YAML_MAPPING_NODE)
		return;
	/* One source per secret: the literal property, NAME_env or NAME_file. */
	for (yaml_node_pair_t *p = props->data.mapping.pairs.start;
	     p < props->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(ctx->doc, p->key);
		const char *name;

		if (k == NULL || k->type != YAML_SCALAR_NODE)
			continue;
		name = (const char *)k->data.scalar.value;
		for (size_t i = 0; i < IDEM_ARRAY_SIZE(secret_props); i++) {
			size_t n = strlen(secret_props[i]);

			if (strncmp(name, secret_props[i], n) != 0 ||
			    (name[n] != '\0' && strcmp(name + n, "_env") != 0 &&
			     strcmp(name + n, "_file") != 0))
				continue;
			if (seen[i] != NULL && strcmp(seen[i], name) != 0)
				idem__cfg_error(
				        ctx, k,
				        "kafka properties '%s' and '%s' are mutually exclusive; set one of them",
				        seen[i], name);
			else
				seen[i] = name;
		}
	}
}

size_t idem_cfg_secret_warnings(const struct idem_cfg *cfg, idem_cfg_warn_fn *fn, void *arg)
{
	size_t n = 0;
	char msg[256];

	for (size_t i = 0; i < cfg->n_kafka_props; i++) {
		const char *name = cfg->kafka_props[i].name, *advice = literal_advice(name);

		if (advice == NULL)
			continue;
		if (advice[0] == '_')
			snprintf(
			        msg, sizeof(msg),
			        "kafka property '%s' is a secret written in the configuration file; use '%s_file' or '%s_env' instead",
			        name, name, name);
		else
			snprintf(
			        msg, sizeof(msg),
			        "kafka property '%s' is a secret written in the configuration file; use '%s' (a file of mode 0600) instead",
			        name, advice);
		n++;
		if (fn != NULL)
			fn(msg, arg);
	}
	return n;
}

idem_status idem_cfg_secrets_check(const struct idem_cfg *cfg, idem_error *err)
{
	char *buf = malloc(IDEM_CFG_SECRET_MAX);
	idem_status r;
	bool set;

	if (buf == NULL)
		return idem_error_nomem(err);
	/* The same room as the readers that use them: idem_pg and idem_schemas. */
	r = idem_secret_read("postgres", cfg->password_env, cfg->password_file, buf,
	                     IDEM_CFG_PASSWORD_MAX, &set, err);
	if (r == IDEM_OK && cfg->registry_url != NULL)
		r = idem_secret_read("schema_registry", cfg->registry_password_env,
		                     cfg->registry_password_file, buf, IDEM_CFG_PASSWORD_MAX, &set,
		                     err);
	for (size_t i = 0; r == IDEM_OK && i < cfg->n_kafka_props; i++) {
		const struct idem_kv *kv = &cfg->kafka_props[i];
		char key[160];
		bool file;

		if (idem_cfg_kafka_secret_ref(kv->name, &file) == 0)
			continue;
		snprintf(key, sizeof(key), "kafka.properties.%s", kv->name);
		r = idem_secret_get(key, file ? NULL : kv->value, file ? kv->value : NULL, buf,
		                    IDEM_CFG_SECRET_MAX, &set, err);
	}
	idem_secret_wipe(buf, IDEM_CFG_SECRET_MAX);
	free(buf);
	return r;
}
