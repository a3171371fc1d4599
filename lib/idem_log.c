/*
 * idem_log.c - the logger: one line per event on stderr.
 *
 * Under journald (stderr is the journal stream) lines carry a "<N>" priority prefix that
 * systemd understands; elsewhere an ISO 8601 UTC timestamp and the pid.
 */
#include "idem_log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static enum idem_log_level log_level = IDEM_LOG_INFO;
static bool log_journal;

static const char *const level_names[] = { "error", "warn", "info", "debug" };
static const int level_prio[] = { 3, 4, 6, 7 };

void idem_log_set_level(enum idem_log_level level)
{
	log_level = level;
}

enum idem_log_level idem_log_get_level(void)
{
	return log_level;
}

void idem_log_set_journal(bool on)
{
	log_journal = on;
}

void idem_log_auto_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
		return;
	if (fstat(STDERR_FILENO, &st) == 0 && st.st_dev == (dev_t)dev && st.st_ino == (ino_t)ino)
		log_journal = true;
}

bool idem_log_level_parse(const char *s, enum idem_log_level *ret_level)
{
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(level_names); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*ret_level = (enum idem_log_level)i;
			return true;
		}
	}
	return false;
}

const char *idem_log_level_name(enum idem_log_level level)
{
	return level_names[level];
}

void idem_log_write(enum idem_log_level level, const char *mod, const char *fmt, ...)
{
	int saved_errno = errno;
	char line[4096];
	size_t off = 0;
	va_list ap;
	int n;

	if (level > log_level)
		goto out;
	if (log_journal) {
		n = snprintf(line, sizeof(line), "<%d>%s %s: ", level_prio[level],
		             level_names[level], mod);
	} else {
		struct timespec ts;
		struct tm tm;

		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		n = snprintf(
		        line, sizeof(line),
		        "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ [%ld] %s %s: ", tm.tm_year + 1900,
		        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		        ts.tv_nsec / 1000000, (long)getpid(), level_names[level], mod);
	}
	if (n > 0)
		off = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
	va_start(ap, fmt);
	n = vsnprintf(line + off, sizeof(line) - off, fmt, ap);
	va_end(ap);
	if (n > 0)
		off += (size_t)n < sizeof(line) - off ? (size_t)n : sizeof(line) - off - 1;
	/* One event is one line: fold embedded newlines (e.g. from libpq messages). */
	for (size_t i = 0; i < off; i++) {
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	}
	while (off > 0 && line[off - 1] == ' ')
		off--;
	line[off++] = '\n';
	(void)!write(STDERR_FILENO, line, off);
out:
	errno = saved_errno;
}
