/*
 * idemctl_quarantine.c - idemctl quarantine list|show|retry|discard.
 */
#include <stdio.h>

#include "idemctl.h"

void idemctl_quarantine_usage(FILE *f)
{
	fprintf(f, "  quarantine list|show|retry|discard   (not available yet)\n");
}

int idemctl_quarantine(const struct idem_cfg *cfg, int argc, char **argv)
{
	(void)cfg;
	(void)argc;
	(void)argv;
	fprintf(stderr, "idemctl: quarantine: not available yet\n");
	return IDEMCTL_EXIT_FAILURE;
}
