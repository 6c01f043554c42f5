/* fwdfloor: the floor for forwarding Dubbo requests, run by `make bench` next to HAProxy and
 * Stormgate.
 *
 *   fwdfloor --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT [--upstream-conns 4]
 *
 * It multiplexes, as Stormgate does: every consumer's two-way requests go to the provider over a few
 * shared upstream connections (consumer fd mod --upstream-conns) with the request id rewritten to
 * one of its own, and each response goes back to its consumer with the original id restored. One
 * thread, one level-triggered epoll set; every readable socket gets one read(2) per wake-up; frames
 * are forwarded whole (a partial frame waits for the rest); what one epoll_wait(2) batch produces for
 * a socket leaves in one write(2) after the batch, so requests of many consumers share an upstream
 * write and responses in one upstream read share its read. Heartbeats from consumers and from the
 * provider are answered here (Java form). Nothing else: no timers, no limits beyond an 8 MiB frame,
 * no reconnect (it exits when an upstream connection closes), no metrics, no hold queue, no health.
 * What it spends per request is the least a multiplexing Dubbo proxy on epoll can spend, which is
 * the floor for Stormgate's CPU per forwarded request (HAProxy in TCP mode, which pays two sockets
 * per consumer, is the yardstick the targets name). */
#include "floor.h"

#define MAX_FRAME (8u << 20)
#define MAX_UP 64
#define PEND_BITS 18
#define PEND_MASK ((1u << PEND_BITS) - 1)

enum { FREE, CONSUMER, UPSTREAM };

struct buf {
	uint8_t *p;
	size_t len, cap;
};

struct conn {
	int kind;
	uint32_t gen; /* bumped when the descriptor is closed: stale pending entries no longer match */
	struct buf in, out;
	int dirty, pollout;
};

struct pend {
	uint64_t uid; /* 0: free */
	int fd;
	uint32_t gen;
	uint8_t id[8]; /* the consumer's request id */
};

static struct conn *conns;
static int nfd, ep;
static struct pend pend[1u << PEND_BITS];
static uint64_t next_uid = 1;
static int ups[MAX_UP], nup = 4;
static int *dirty, ndirty;
static uint8_t rbuf[256 << 10];

static void buf_add(struct buf *b, const void *p, size_t n) {
	if (b->len + n > b->cap) {
		size_t c = b->cap ? b->cap : 4096;
		while (c < b->len + n)
			c *= 2;
		b->p = realloc(b->p, c);
		if (!b->p)
			die("realloc");
		b->cap = c;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void buf_free(struct buf *b) {
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

static void mark(int fd) {
	if (!conns[fd].dirty) {
		conns[fd].dirty = 1;
		dirty[ndirty++] = fd;
	}
}

static void set_events(int fd, uint32_t events) {
	struct epoll_event ev = {.events = events, .data.fd = fd};
	epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
}

static void close_conn(int fd) {
	struct conn *c = &conns[fd];
	if (c->kind == UPSTREAM) {
		fprintf(stderr, "fwdfloor: upstream connection closed; exiting (no reconnect)\n");
		exit(1);
	}
	close(fd);
	buf_free(&c->in);
	buf_free(&c->out);
	c->kind = FREE;
	c->gen++;
	c->pollout = 0;
	c->dirty = 0; /* a dirty-list entry left behind is skipped: kind is FREE */
}

/* flush writes what is queued for fd; the rest waits for EPOLLOUT. -1: close. */
static int flush(int fd) {
	struct conn *c = &conns[fd];
	if (c->out.len > 0) {
		ssize_t n = write(fd, c->out.p, c->out.len);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
		if (n > 0) {
			memmove(c->out.p, c->out.p + n, c->out.len - (size_t)n);
			c->out.len -= (size_t)n;
		}
	}
	int want = c->out.len > 0;
	if (want != c->pollout) {
		c->pollout = want;
		set_events(fd, want ? EPOLLIN | EPOLLOUT : EPOLLIN);
	}
	return 0;
}

static void put_uid(uint8_t *h, uint64_t uid) {
	for (int i = 0; i < 8; i++)
		h[4 + i] = (uint8_t)(uid >> (56 - 8 * i));
}

static uint64_t get_uid(const uint8_t *h) {
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | h[4 + i];
	return v;
}

/* alloc_uid returns a fresh upstream id whose pending slot is free (or held by a closed consumer). */
static uint64_t alloc_uid(void) {
	for (;;) {
		uint64_t uid = next_uid++;
		struct pend *p = &pend[uid & PEND_MASK];
		if (p->uid == 0 || conns[p->fd].gen != p->gen)
			return uid;
	}
}

/* consumer_frame handles one whole frame f (header + body, n bytes) from consumer fd. */
static void consumer_frame(int fd, uint8_t *f, size_t n) {
	uint8_t fl = f[2];
	if (!(fl & FLAG_REQUEST))
		return; /* a response from a consumer answers nothing we sent */
	if (fl & FLAG_EVENT) {
		if (fl & FLAG_TWOWAY) {
			uint8_t r[HEARTBEAT_REPLY_LEN];
			heartbeat_reply(r, f);
			buf_add(&conns[fd].out, r, sizeof r);
			mark(fd);
		}
		return;
	}
	uint64_t uid = alloc_uid();
	if (fl & FLAG_TWOWAY) {
		struct pend *p = &pend[uid & PEND_MASK];
		p->uid = uid;
		p->fd = fd;
		p->gen = conns[fd].gen;
		memcpy(p->id, f + 4, 8);
	}
	put_uid(f, uid);
	int u = ups[fd % nup];
	buf_add(&conns[u].out, f, n);
	mark(u);
}

/* upstream_frame handles one whole frame from upstream connection fd. */
static void upstream_frame(int fd, uint8_t *f, size_t n) {
	uint8_t fl = f[2];
	if (fl & FLAG_REQUEST) { /* the provider's heartbeat */
		if ((fl & (FLAG_EVENT | FLAG_TWOWAY)) == (FLAG_EVENT | FLAG_TWOWAY)) {
			uint8_t r[HEARTBEAT_REPLY_LEN];
			heartbeat_reply(r, f);
			buf_add(&conns[fd].out, r, sizeof r);
			mark(fd);
		}
		return;
	}
	if (fl & FLAG_EVENT)
		return;
	uint64_t uid = get_uid(f);
	struct pend *p = &pend[uid & PEND_MASK];
	if (p->uid != uid)
		return; /* unknown id */
	p->uid = 0;
	struct conn *c = &conns[p->fd];
	if (c->kind != CONSUMER || c->gen != p->gen)
		return; /* its consumer has gone */
	memcpy(f + 4, p->id, 8);
	buf_add(&c->out, f, n);
	mark(p->fd);
}

/* frames handles the whole frames at the start of p (n bytes) and returns how many bytes they
 * took, or -1 when the stream is not Dubbo. */
static ssize_t frames(int fd, uint8_t *p, size_t n) {
	size_t off = 0;
	while (n - off >= DUBBO_HDR) {
		uint8_t *f = p + off;
		if (f[0] != 0xda || f[1] != 0xbb)
			return -1;
		uint32_t blen = be32(f + 12);
		if (blen > MAX_FRAME)
			return -1;
		if (n - off < DUBBO_HDR + (size_t)blen)
			break;
		if (conns[fd].kind == CONSUMER)
			consumer_frame(fd, f, DUBBO_HDR + blen);
		else
			upstream_frame(fd, f, DUBBO_HDR + blen);
		off += DUBBO_HDR + blen;
	}
	return (ssize_t)off;
}

/* on_read reads once from fd and handles every whole frame; a partial frame is kept. -1: close. */
static int on_read(int fd) {
	ssize_t n = read(fd, rbuf, sizeof rbuf);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		return -1;
	if (n < 0)
		return 0;
	struct buf *in = &conns[fd].in;
	if (in->len == 0) { /* the common case: whole frames straight from the read buffer */
		ssize_t used = frames(fd, rbuf, (size_t)n);
		if (used < 0)
			return -1;
		if (used < n)
			buf_add(in, rbuf + used, (size_t)(n - used));
		return 0;
	}
	buf_add(in, rbuf, (size_t)n);
	ssize_t used = frames(fd, in->p, in->len);
	if (used < 0)
		return -1;
	memmove(in->p, in->p + used, in->len - (size_t)used);
	in->len -= (size_t)used;
	return 0;
}

static void add(int fd, int kind) {
	memset(&conns[fd].in, 0, sizeof(struct buf));
	memset(&conns[fd].out, 0, sizeof(struct buf));
	conns[fd].kind = kind;
	conns[fd].dirty = conns[fd].pollout = 0;
	if (watch(ep, fd) < 0)
		die("epoll_ctl");
}

static void add_consumer(int fd) { add(fd, CONSUMER); }

static int dial(const char *addr) {
	struct sockaddr_in sa;
	if (parse_addr(addr, &sa) < 0) {
		fprintf(stderr, "bad address %s (want a.b.c.d:port)\n", addr);
		exit(2);
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		die("connect upstream");
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

int main(int argc, char **argv) {
	const char *laddr = NULL, *uaddr = NULL;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--listen") == 0)
			laddr = argv[i + 1];
		else if (strcmp(argv[i], "--upstream") == 0)
			uaddr = argv[i + 1];
		else if (strcmp(argv[i], "--upstream-conns") == 0)
			nup = atoi(argv[i + 1]);
	}
	if (!laddr || !uaddr || nup < 1 || nup > MAX_UP) {
		fprintf(stderr, "usage: fwdfloor --listen IP:PORT --upstream IP:PORT [--upstream-conns 1..%d]\n", MAX_UP);
		return 2;
	}
	nfd = max_fds();
	conns = calloc((size_t)nfd, sizeof *conns);
	dirty = calloc(2 * (size_t)nfd, sizeof *dirty); /* an fd closed and reused in one batch may appear twice */
	if (!conns || !dirty)
		die("calloc");
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	for (int i = 0; i < nup; i++) {
		ups[i] = dial(uaddr);
		nodelay(ups[i]);
		add(ups[i], UPSTREAM);
	}
	int lfd = listen_on(laddr, 4096);
	if (watch(ep, lfd) < 0)
		die("epoll_ctl");
	struct epoll_event evs[1024];
	for (;;) {
		int n = epoll_wait(ep, evs, 1024, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == lfd) {
				accept_all(lfd, nfd, add_consumer);
				continue;
			}
			if (conns[fd].kind == FREE)
				continue; /* closed earlier in this batch */
			if ((evs[i].events & EPOLLOUT) && flush(fd) < 0) {
				close_conn(fd);
				continue;
			}
			if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && on_read(fd) < 0)
				close_conn(fd);
		}
		/* One write per socket for everything this batch produced for it. */
		for (int i = 0; i < ndirty; i++) {
			int fd = dirty[i];
			if (conns[fd].kind == FREE)
				continue;
			conns[fd].dirty = 0;
			if (flush(fd) < 0)
				close_conn(fd);
		}
		ndirty = 0;
	}
}
