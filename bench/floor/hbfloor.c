/* hbfloor: the floor for answering Dubbo heartbeats, run by `make bench` next to Stormgate.
 *
 *   hbfloor --listen 127.0.0.1:PORT     (PORT 0: any; prints "READY <port>" once listening)
 *
 * On SIGUSR1 it prints "ANSWERED <n>", the heartbeats answered so far (bench/suite counts a
 * window's heartbeats with it; the count costs one addition per read).
 *
 * One thread, one level-triggered epoll set. A readable connection gets one read(2); every
 * heartbeat request in what it read (flags request | two-way | event) gets the Java-exact reply
 * da bb 22 14 <id:8> 00 00 00 01 4e, and all of them go out in one write(2). Headers split across
 * reads are reassembled; bodies are skipped. Nothing else: no timers, no metrics, no limits, no
 * buffering of a short write (a connection whose socket cannot take 17 bytes per heartbeat is closed,
 * which never happens with heartbeating consumers). Whatever it spends per heartbeat is the
 * kernel's loopback TCP work plus the least an event loop can add, which is the yardstick for
 * Stormgate's CPU per answered heartbeat. */
#include "floor.h"

#include <signal.h>

struct conn {
	uint8_t hdr[DUBBO_HDR]; /* a header split across reads */
	uint8_t hlen;
	uint32_t skip; /* body bytes still to skip */
};

static struct conn *conns;
static int ep;
static unsigned long long answered;
static volatile sig_atomic_t report;

static void on_usr1(int sig) {
	(void)sig;
	report = 1; /* epoll_wait returns EINTR; the loop prints */
}

static uint8_t inbuf[64 << 10];
static uint8_t outbuf[(sizeof inbuf / DUBBO_HDR + 1) * HEARTBEAT_REPLY_LEN];

static void add(int fd) {
	memset(&conns[fd], 0, sizeof conns[fd]);
	if (watch(ep, fd) < 0)
		close(fd);
}

/* serve handles one readable connection; it returns -1 when the connection must be closed. */
static int serve(int fd) {
	ssize_t n = read(fd, inbuf, sizeof inbuf);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		return -1;
	if (n < 0)
		return 0;
	struct conn *c = &conns[fd];
	const uint8_t *p = inbuf, *end = inbuf + n;
	size_t out = 0;
	while (p < end) {
		if (c->skip) {
			size_t k = (size_t)(end - p) < c->skip ? (size_t)(end - p) : c->skip;
			p += k;
			c->skip -= (uint32_t)k;
			continue;
		}
		size_t k = DUBBO_HDR - c->hlen;
		if ((size_t)(end - p) < k)
			k = (size_t)(end - p);
		memcpy(c->hdr + c->hlen, p, k);
		c->hlen += (uint8_t)k;
		p += k;
		if (c->hlen < DUBBO_HDR)
			break;
		c->hlen = 0;
		if (c->hdr[0] != 0xda || c->hdr[1] != 0xbb)
			return -1;
		c->skip = be32(c->hdr + 12);
		if ((c->hdr[2] & (FLAG_REQUEST | FLAG_TWOWAY | FLAG_EVENT)) == (FLAG_REQUEST | FLAG_TWOWAY | FLAG_EVENT)) {
			heartbeat_reply(outbuf + out, c->hdr);
			out += HEARTBEAT_REPLY_LEN;
		}
	}
	if (out > 0 && write(fd, outbuf, out) != (ssize_t)out)
		return -1;
	answered += out / HEARTBEAT_REPLY_LEN;
	return 0;
}

int main(int argc, char **argv) {
	const char *addr = NULL;
	for (int i = 1; i + 1 < argc; i += 2)
		if (strcmp(argv[i], "--listen") == 0)
			addr = argv[i + 1];
	if (!addr) {
		fprintf(stderr, "usage: hbfloor --listen IP:PORT\n");
		return 2;
	}
	struct sigaction sa = {.sa_handler = on_usr1};
	sigaction(SIGUSR1, &sa, NULL);
	int nfd = max_fds();
	conns = calloc((size_t)nfd, sizeof *conns);
	if (!conns)
		die("calloc");
	int lfd = listen_on(addr, 4096);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0 || watch(ep, lfd) < 0)
		die("epoll");
	struct epoll_event evs[1024];
	for (;;) {
		int n = epoll_wait(ep, evs, 1024, -1);
		if (report) {
			report = 0;
			printf("ANSWERED %llu\n", answered);
			fflush(stdout);
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == lfd) {
				accept_all(lfd, nfd, add);
				continue;
			}
			if (serve(fd) < 0)
				close(fd); /* also leaves the epoll set */
		}
	}
}
