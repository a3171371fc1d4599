/*
 * idem_notify.c - sd_notify without libsystemd.
 *
 * The protocol is a stable, documented datagram format; writing it takes a few lines, so idemd
 * does not link libsystemd for it.
 */
#include "idem_notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

bool idem_notify(const char *fmt, ...)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa;
	socklen_t salen;
	char msg[1024];
	va_list ap;
	ssize_t n;
	size_t len;
	int fd;

	if (path == NULL || path[0] == '\0' || (path[0] != '/' && path[0] != '@'))
		return false;
	len = strlen(path);
	if (len >= sizeof(sa.sun_path))
		return false;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, len);
	if (path[0] == '@')
		sa.sun_path[0] = '\0'; /* abstract namespace */
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/'));

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(msg))
		return false;

	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	n = sendto(fd, msg, (size_t)n, MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
	close(fd);
	return n >= 0;
}

uint64_t idem_notify_watchdog_usec(void)
{
	const char *usec = getenv("WATCHDOG_USEC");
	const char *pid = getenv("WATCHDOG_PID");
	char *end;
	unsigned long long v;

	if (usec == NULL)
		return 0;
	if (pid != NULL && strtoll(pid, NULL, 10) != (long long)getpid())
		return 0;
	v = strtoull(usec, &end, 10);
	if (*end != '\0')
		return 0;
	return v;
}
