/*
 * idem_log.c - the logger: one line per event on stderr.
 *
 * Every message goes through idem_esc() before it is written: whatever a caller passed, a line
 * holds no CR, LF, ESC or other control and no bidi control, so that no text taken from a
 * message can end the line, start one that looks like another event, or drive the terminal or
 * viewer that shows it.
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

#include "idem_esc.h"

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

/* @len, less an incomplete UTF-8 sequence at the end of @s (what a cut may leave). */
static size_t utf8_whole(const char *s, size_t len)
{
	size_t i = len, need;
	unsigned char c;

	while (i > 0 && len - i < 3 && ((unsigned char)s[i - 1] & 0xc0) == 0x80)
		i--;
	if (i == 0)
		return len;
	c = (unsigned char)s[i - 1];
	need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
	return len - (i - 1) < need ? i - 1 : len;
}

void idem_log_write(enum idem_log_level level, const char *mod, const char *fmt, ...)
{
	int saved_errno = errno;
	char msg[4096], line[8192];
	size_t off = 0, len = 0, w, mark = sizeof(IDEM_ESC_TRUNC) - 1;
	bool cut = false;
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
		off = (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n > 0) {
		cut = (size_t)n >= sizeof(msg);
		len = cut ? utf8_whole(msg, sizeof(msg) - 1) : (size_t)n;
	}
	/* A trailing newline (libpq's messages end in one) is not part of the event. */
	while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == '\r' || msg[len - 1] == ' ' ||
	                   msg[len - 1] == '\t'))
		len--;
	/*
	 * The last line of defence, whatever a caller passed: one event is one line (no CR or
	 * LF), and nothing a terminal or a log viewer would obey (ESC sequences, other controls,
	 * bidi) reaches it raw. Backslashes stay: quoted values were escaped at their call site
	 * (IDEM_ESC_QUOTE), and escaping them again would double theirs.
	 */
	w = sizeof(line) - off - 1;
	if (idem_esc(line + off, w, msg, len, IDEM_ESC_KEEP_BACKSLASH) >= w)
		cut = false; /* marked by idem_esc() already */
	off += strlen(line + off);
	if (cut && sizeof(line) - off - 1 >= mark) {
		memcpy(line + off, IDEM_ESC_TRUNC, mark);
		off += mark;
	}
	line[off++] = '\n';
	(void)!write(STDERR_FILENO, line, off);
out:
	errno = saved_errno;
}
