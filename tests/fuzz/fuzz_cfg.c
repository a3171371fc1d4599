/*
 * fuzz_cfg.c - libFuzzer target: idem_cfg_parse() on arbitrary bytes.
 *
 * Whatever the input, parsing must return a status without crashing, leaking or reading out of
 * bounds, and exactly one of the configuration and the error text must come back.
 */
#include <stdint.h>
#include <stdlib.h>

#include "idem_cfg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idem_cfg *cfg = NULL;
	char *errors = NULL;
	idem_status r;

	r = idem_cfg_parse("fuzz.yaml", (const char *)data, size, &cfg, &errors);
	if ((r == IDEM_OK) != (cfg != NULL) || (r == IDEM_ERR_CONFIG) != (errors != NULL))
		abort();
	if (cfg != NULL && (cfg->n_routes == 0 || cfg->n_topics == 0 ||
	                    idem_cfg_route_for(cfg, cfg->topics[0]) == NULL))
		abort();
	idem_cfg_free(cfg);
	free(errors);
	return 0;
}
