/* Shared by the floor programs of `make bench` (hbfloor.c, fwdfloor.c): argument parsing, the
 * listening socket, and the Dubbo header constants. Linux only (epoll, accept4). */
#ifndef FLOOR_H
#define FLOOR_H

#define _GNU_SOURCE /* accept4 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define DUBBO_HDR 16
#define FLAG_REQUEST 0x80
#define FLAG_TWOWAY 0x40
#define FLAG_EVENT 0x20
#define SERIAL_MASK 0x1f
#define STATUS_OK 20

static void die(const char *what) {
	fprintf(stderr, "%s: %s\n", what, strerror(errno));
	exit(1);
}

/* parse_addr fills sa from "a.b.c.d:port" (IPv4 only: the bench runs over loopback). */
static int parse_addr(const char *s, struct sockaddr_in *sa) {
	char host[64];
	const char *colon = strrchr(s, ':');
	if (!colon || (size_t)(colon - s) >= sizeof host)
		return -1;
	memcpy(host, s, colon - s);
	host[colon - s] = 0;
	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)atoi(colon + 1));
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

/* listen_on returns a non-blocking listening socket on addr (port 0: any) with the given backlog,
 * and prints "READY <port>" on stdout once it listens, which is what bench/suite waits for. */
static int listen_on(const char *addr, int backlog) {
	struct sockaddr_in sa;
	if (parse_addr(addr, &sa) < 0) {
		fprintf(stderr, "bad address %s (want a.b.c.d:port)\n", addr);
		exit(2);
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		die("bind");
	if (listen(fd, backlog) < 0)
		die("listen");
	socklen_t len = sizeof sa;
	getsockname(fd, (struct sockaddr *)&sa, &len);
	printf("READY %d\n", ntohs(sa.sin_port));
	fflush(stdout);
	return fd;
}

/* max_fds raises the soft descriptor limit to the hard one and returns it: per-fd tables are
 * indexed by descriptor. */
static int max_fds(void) {
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		die("getrlimit");
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	getrlimit(RLIMIT_NOFILE, &rl);
	return rl.rlim_cur > 1 << 20 ? 1 << 20 : (int)rl.rlim_cur;
}

static void nodelay(int fd) {
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* watch adds fd to the epoll set ep for reading (level-triggered); data.fd is fd. */
static int watch(int ep, int fd) {
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
	return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

/* accept_all accepts every connection waiting on the non-blocking listener lfd (one wake-up
 * drains the queue), sets TCP_NODELAY as Stormgate does, and hands each to add; a descriptor
 * beyond the per-fd tables (nfd) is closed. */
static void accept_all(int lfd, int nfd, void (*add)(int fd)) {
	int c;
	while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		if (c >= nfd) {
			close(c);
			continue;
		}
		nodelay(c);
		add(c);
	}
}

static uint32_t be32(const uint8_t *p) {
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* heartbeat_reply writes the Java form of a heartbeat response for the request header req:
 * da bb (event | serialization) 14 <id:8> 00 00 00 01 4e, 17 bytes. */
static void heartbeat_reply(uint8_t *out, const uint8_t *req) {
	out[0] = 0xda;
	out[1] = 0xbb;
	out[2] = FLAG_EVENT | (req[2] & SERIAL_MASK);
	out[3] = STATUS_OK;
	memcpy(out + 4, req + 4, 8);
	out[12] = out[13] = out[14] = 0;
	out[15] = 1;
	out[16] = 'N';
}

#define HEARTBEAT_REPLY_LEN 17

#endif
