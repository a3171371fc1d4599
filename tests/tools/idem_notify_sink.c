/*
 * idem-notify-sink - stand in for systemd's notification socket in tests.
 *
 * usage: idem-notify-sink SOCKET_PATH
 * Binds an AF_UNIX datagram socket at SOCKET_PATH and prints every line of every datagram as
 * "MILLISECONDS LINE" (CLOCK_MONOTONIC), flushing each, until SIGTERM/SIGINT.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_un sa;
	struct sigaction act;
	char buf[4096];
	int fd;

	if (argc != 2 || strlen(argv[1]) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "usage: idem-notify-sink SOCKET_PATH\n");
		return 2;
	}
	memset(&act, 0, sizeof(act));
	act.sa_handler = on_signal;
	sigaction(SIGTERM, &act, NULL);
	sigaction(SIGINT, &act, NULL);
	fd = socket(AF_UNIX, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("idem-notify-sink: socket");
		return 1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	strcpy(sa.sun_path, argv[1]);
	unlink(argv[1]);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		perror("idem-notify-sink: bind");
		return 1;
	}
	while (!stop) {
		ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
		struct timespec ts;
		char *line, *save = NULL;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("idem-notify-sink: recv");
			return 1;
		}
		buf[n] = '\0';
		clock_gettime(CLOCK_MONOTONIC, &ts);
		for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			printf("%lld %s\n", (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
			       line);
		fflush(stdout);
	}
	unlink(argv[1]);
	return 0;
}
