/*
 * A FUSE file system that stores nothing, served either by the classic
 * request loop (read(2) requests from /dev/fuse, writev(2) replies) or by
 * FUSE over io_uring (kernel 6.14+, fs/fuse/dev_uring.c): the same request
 * handlers behind both transports, so a comparison of the two isolates
 * the transport. It negotiates FUSE as the benchmarks' null file system
 * (crates/fuse/examples/null_fs.rs): 1 MiB requests, 64 background
 * requests, write-back cache, asynchronous direct I/O, a 4 MiB readahead
 * window; one flat directory of files that are only sizes; reads return
 * zeros, written bytes are dropped.
 *
 *   nullfs_ring MOUNTPOINT [--ring] [--threads N] [--depth N] [--no-pin]
 *               [--coop-taskrun | --defer-taskrun]
 *
 * Classic (default): N threads (default 4), each reading its own cloned
 * /dev/fuse descriptor, as the f2fuse daemon does. --ring: one io_uring
 * per kernel queue (one queue per possible CPU), each with --depth ring
 * entries (default 8) of a 1 MiB payload buffer, its thread pinned to the
 * queue's CPU (unless --no-pin); a classic reader on /dev/fuse stays for
 * the requests the kernel still sends there (FORGET, INTERRUPT). The
 * taskrun options make the rings IORING_SETUP_COOP_TASKRUN or
 * IORING_SETUP_DEFER_TASKRUN (both SINGLE_ISSUER): how the kernel hands a
 * request to the ring's thread. Needs
 * root (mount(2)) and, for --ring, /sys/module/fuse/parameters/enable_uring
 * set to Y. Runs in the foreground until unmounted (umount MOUNTPOINT).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

/* FUSE over io_uring (uapi fuse.h 7.42); the system header here is older. */
#define OVER_IO_URING_FLAG2 (1u << (41 - 32)) /* FUSE_OVER_IO_URING in flags2 */
#define URING_CMD_REGISTER 1u
#define URING_CMD_COMMIT_AND_FETCH 2u
#define URING_IN_OUT_HEADER_SZ 128
#define URING_OP_IN_OUT_SZ 128

struct uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id; /* the request's unique, echoed in the commit */
	uint32_t payload_sz;
	uint32_t padding;
	uint64_t reserved;
};

struct uring_req_header {
	char in_out[URING_IN_OUT_HEADER_SZ]; /* fuse_in_header / fuse_out_header */
	char op_in[URING_OP_IN_OUT_SZ];      /* the opcode's fixed argument */
	struct uring_ent_in_out ring_ent_in_out;
};

struct uring_cmd_req { /* in the SQE128's 80-byte command area */
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};

#define MAX_WRITE (1u << 20)
#define MAX_PAGES (MAX_WRITE / 4096)
#define READ_AHEAD_KB 4096
/* The largest request: a 1 MiB write with its headers. */
#define CLASSIC_BUF (MAX_WRITE + 64 * 1024)
#define ROOT_INO 1
#define BUCKETS (1u << 16)

static const char ZEROS[MAX_WRITE];

/* ---- the file table: one flat directory of sizes ---- */

struct file {
	struct file *next; /* in its hash bucket */
	uint64_t ino;
	uint64_t size;
	char name[];
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct file *buckets[BUCKETS];
static struct file **by_ino; /* index ino - 2 */
static size_t n_inos, cap_inos;

static uint32_t name_hash(const char *name)
{
	uint32_t h = 2166136261u;
	for (; *name; name++)
		h = (h ^ (uint8_t)*name) * 16777619u;
	return h & (BUCKETS - 1);
}

/* Callers hold table_lock. */
static struct file *file_by_name(const char *name)
{
	struct file *f = buckets[name_hash(name)];
	while (f && strcmp(f->name, name) != 0)
		f = f->next;
	return f;
}

static struct file *file_by_ino(uint64_t ino)
{
	return ino >= 2 && ino - 2 < n_inos ? by_ino[ino - 2] : NULL;
}

static struct file *file_create(const char *name)
{
	struct file *f = file_by_name(name);
	if (f)
		return f;
	if (n_inos == cap_inos) {
		cap_inos = cap_inos ? cap_inos * 2 : 1024;
		by_ino = realloc(by_ino, cap_inos * sizeof(*by_ino));
		if (!by_ino)
			abort();
	}
	f = malloc(sizeof(*f) + strlen(name) + 1);
	if (!f)
		abort();
	strcpy(f->name, name);
	f->ino = n_inos + 2;
	f->size = 0;
	by_ino[n_inos++] = f;
	uint32_t b = name_hash(name);
	f->next = buckets[b];
	buckets[b] = f;
	return f;
}

static int file_unlink(const char *name)
{
	struct file **p = &buckets[name_hash(name)];
	while (*p && strcmp((*p)->name, name) != 0)
		p = &(*p)->next;
	struct file *f = *p;
	if (!f)
		return -ENOENT;
	*p = f->next;
	by_ino[f->ino - 2] = NULL;
	free(f);
	return 0;
}

/* ---- requests and replies, the same for both transports ---- */

struct request {
	const struct fuse_in_header *in;
	const void *op;      /* the opcode's fixed argument (fuse_write_in, ...) */
	const char *payload; /* what follows it: a name, written data */
	uint32_t payload_len;
	/* The reply: out_len bytes at out (a ring payload buffer or any memory). */
	int error;
	const void *out;
	uint32_t out_len;
	/* Where a reply body of up to out_cap bytes may be built. */
	char *out_buf;
	uint32_t out_cap;
	/* Ring entries only: how much of out_buf is not zero (reads need zeros). */
	uint32_t *dirty;
};

/* Size of the fixed argument the kernel puts first (in_args[0]); for ring
 * entries it arrives in op_in, the rest in the payload buffer. */
static uint32_t op_size(uint32_t opcode)
{
	switch (opcode) {
	case FUSE_INIT: return sizeof(struct fuse_init_in);
	case FUSE_GETATTR: return sizeof(struct fuse_getattr_in);
	case FUSE_SETATTR: return sizeof(struct fuse_setattr_in);
	case FUSE_CREATE: return sizeof(struct fuse_create_in);
	case FUSE_OPEN:
	case FUSE_OPENDIR: return sizeof(struct fuse_open_in);
	case FUSE_READ:
	case FUSE_READDIR: return sizeof(struct fuse_read_in);
	case FUSE_WRITE: return sizeof(struct fuse_write_in);
	case FUSE_FLUSH: return sizeof(struct fuse_flush_in);
	case FUSE_FSYNC:
	case FUSE_FSYNCDIR: return sizeof(struct fuse_fsync_in);
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR: return sizeof(struct fuse_release_in);
	case FUSE_FORGET: return sizeof(struct fuse_forget_in);
	case FUSE_BATCH_FORGET: return sizeof(struct fuse_batch_forget_in);
	case FUSE_INTERRUPT: return sizeof(struct fuse_interrupt_in);
	case FUSE_ACCESS: return sizeof(struct fuse_access_in);
	case FUSE_GETXATTR: return sizeof(struct fuse_getxattr_in);
	case FUSE_FALLOCATE: return sizeof(struct fuse_fallocate_in);
	default: return 0; /* LOOKUP, UNLINK (name only), STATFS, DESTROY */
	}
}

static void fill_attr(struct fuse_attr *a, uint64_t ino, uint64_t size)
{
	memset(a, 0, sizeof(*a));
	a->ino = ino;
	a->size = size;
	a->blocks = (size + 511) / 512;
	a->blksize = 4096;
	if (ino == ROOT_INO) {
		a->mode = S_IFDIR | 0777;
		a->nlink = 2;
	} else {
		a->mode = S_IFREG | 0666;
		a->nlink = 1;
	}
}

/* The body of a reply, built in req->out_buf. */
static void *reply_body(struct request *req, uint32_t len)
{
	req->out = req->out_buf;
	req->out_len = len;
	memset(req->out_buf, 0, len);
	if (req->dirty && *req->dirty < len)
		*req->dirty = len;
	return req->out_buf;
}

static int attr_of(uint64_t ino, uint64_t *size)
{
	if (ino == ROOT_INO) {
		*size = 0;
		return 0;
	}
	pthread_mutex_lock(&table_lock);
	struct file *f = file_by_ino(ino);
	if (f)
		*size = f->size;
	pthread_mutex_unlock(&table_lock);
	return f ? 0 : -ENOENT;
}

static void reply_entry(struct request *req, uint64_t ino, uint64_t size)
{
	struct fuse_entry_out *e = reply_body(req, sizeof(*e));
	e->nodeid = ino;
	e->entry_valid = 1;
	e->attr_valid = 1;
	fill_attr(&e->attr, ino, size);
}

static void reply_attr(struct request *req, uint64_t ino)
{
	uint64_t size;
	req->error = attr_of(ino, &size);
	if (req->error)
		return;
	struct fuse_attr_out *a = reply_body(req, sizeof(*a));
	a->attr_valid = 1;
	fill_attr(&a->attr, ino, size);
}

static void do_readdir(struct request *req, const struct fuse_read_in *in)
{
	uint32_t cap = in->size < req->out_cap ? in->size : req->out_cap;
	char *buf = reply_body(req, cap);
	uint32_t used = 0;
	pthread_mutex_lock(&table_lock);
	/* Offsets: 0 "." 1 ".." 2 + i the i-th inode slot. */
	for (uint64_t off = in->offset; off < n_inos + 2; off++) {
		const char *name;
		uint64_t ino = ROOT_INO;
		uint32_t type = S_IFDIR >> 12;
		if (off == 0) {
			name = ".";
		} else if (off == 1) {
			name = "..";
		} else {
			struct file *f = by_ino[off - 2];
			if (!f)
				continue;
			name = f->name;
			ino = f->ino;
			type = S_IFREG >> 12;
		}
		size_t namelen = strlen(name);
		size_t len = FUSE_DIRENT_SIZE(&(struct fuse_dirent){.namelen = namelen});
		if (used + len > cap)
			break;
		struct fuse_dirent *d = (struct fuse_dirent *)(buf + used);
		d->ino = ino;
		d->off = off + 1;
		d->namelen = namelen;
		d->type = type;
		memcpy(d->name, name, namelen);
		used += len;
	}
	pthread_mutex_unlock(&table_lock);
	req->out_len = used;
}

static void do_read(struct request *req, const struct fuse_read_in *in)
{
	uint64_t size;
	req->error = attr_of(req->in->nodeid, &size);
	if (req->error)
		return;
	uint64_t n = in->offset < size ? size - in->offset : 0;
	if (n > in->size)
		n = in->size;
	if (req->dirty) {
		/* A ring entry's payload: only what earlier requests left there
		 * needs clearing. */
		if (*req->dirty)
			memset(req->out_buf, 0, *req->dirty);
		*req->dirty = 0;
		req->out = req->out_buf;
	} else {
		req->out = ZEROS;
	}
	req->out_len = n;
}

/* Handles one request (never INIT); false when it takes no reply. */
static int handle(struct request *req)
{
	const struct fuse_in_header *in = req->in;
	req->error = 0;
	req->out = NULL;
	req->out_len = 0;
	switch (in->opcode) {
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
	case FUSE_INTERRUPT:
		return 0;
	case FUSE_LOOKUP: {
		uint64_t ino = 0, size = 0;
		pthread_mutex_lock(&table_lock);
		struct file *f = in->nodeid == ROOT_INO ? file_by_name(req->payload) : NULL;
		if (f) {
			ino = f->ino;
			size = f->size;
		}
		pthread_mutex_unlock(&table_lock);
		if (f)
			reply_entry(req, ino, size);
		else
			req->error = -ENOENT;
		break;
	}
	case FUSE_GETATTR:
		reply_attr(req, in->nodeid);
		break;
	case FUSE_SETATTR: {
		const struct fuse_setattr_in *s = req->op;
		if (s->valid & FATTR_SIZE) {
			pthread_mutex_lock(&table_lock);
			struct file *f = file_by_ino(in->nodeid);
			if (f)
				f->size = s->size;
			pthread_mutex_unlock(&table_lock);
		}
		reply_attr(req, in->nodeid);
		break;
	}
	case FUSE_CREATE: {
		if (in->nodeid != ROOT_INO) {
			req->error = -ENOENT;
			break;
		}
		pthread_mutex_lock(&table_lock);
		struct file *f = file_create(req->payload);
		uint64_t ino = f->ino, size = f->size;
		pthread_mutex_unlock(&table_lock);
		struct {
			struct fuse_entry_out entry;
			struct fuse_open_out open;
		} *r = reply_body(req, sizeof(*r));
		r->entry.nodeid = ino;
		r->entry.entry_valid = 1;
		r->entry.attr_valid = 1;
		fill_attr(&r->entry.attr, ino, size);
		break;
	}
	case FUSE_UNLINK:
		pthread_mutex_lock(&table_lock);
		req->error = in->nodeid == ROOT_INO ? file_unlink(req->payload) : -ENOENT;
		pthread_mutex_unlock(&table_lock);
		break;
	case FUSE_OPEN:
	case FUSE_OPENDIR:
		reply_body(req, sizeof(struct fuse_open_out));
		break;
	case FUSE_READ:
		do_read(req, req->op);
		break;
	case FUSE_READDIR:
		do_readdir(req, req->op);
		break;
	case FUSE_WRITE: {
		const struct fuse_write_in *w = req->op;
		pthread_mutex_lock(&table_lock);
		struct file *f = file_by_ino(in->nodeid);
		if (f && f->size < w->offset + w->size)
			f->size = w->offset + w->size;
		pthread_mutex_unlock(&table_lock);
		if (req->dirty && *req->dirty < w->size)
			*req->dirty = w->size; /* the data landed in the payload */
		struct fuse_write_out *o = reply_body(req, sizeof(*o));
		o->size = w->size;
		break;
	}
	case FUSE_FLUSH:
	case FUSE_FSYNC:
	case FUSE_FSYNCDIR:
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
	case FUSE_ACCESS:
		break;
	case FUSE_STATFS: {
		struct fuse_statfs_out *s = reply_body(req, sizeof(*s));
		s->st.blocks = s->st.bfree = s->st.bavail = 1 << 24;
		s->st.files = s->st.ffree = 1 << 20;
		s->st.bsize = s->st.frsize = 4096;
		s->st.namelen = 255;
		break;
	}
	case FUSE_DESTROY:
		break;
	default:
		req->error = -ENOSYS;
	}
	return 1;
}

/* ---- the classic transport ---- */

static int dev_fd = -1;
/* Requests answered by each transport, printed at exit: proof of which
 * one served the run. */
static unsigned long served_classic, served_ring;

static void classic_reply(int fd, const struct request *req)
{
	struct fuse_out_header out = {
		.len = sizeof(out) + (req->error ? 0 : req->out_len),
		.error = req->error,
		.unique = req->in->unique,
	};
	struct iovec iov[2] = {{&out, sizeof(out)}, {(void *)req->out, req->error ? 0 : req->out_len}};
	if (writev(fd, iov, 2) < 0 && errno != ENOENT)
		perror("writev /dev/fuse");
}

/* Reads and answers requests on fd until the connection ends. */
static void *classic_loop(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char *buf = aligned_alloc(4096, CLASSIC_BUF);
	char *body = aligned_alloc(4096, 64 * 1024);
	if (!buf || !body)
		abort();
	for (;;) {
		ssize_t n = read(fd, buf, CLASSIC_BUF);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ENOENT)
				continue;
			if (errno != ENODEV)
				perror("read /dev/fuse");
			break;
		}
		struct request req = {.in = (void *)buf, .out_buf = body, .out_cap = 64 * 1024};
		uint32_t fixed = op_size(req.in->opcode);
		req.op = buf + sizeof(*req.in);
		req.payload = buf + sizeof(*req.in) + fixed;
		req.payload_len = req.in->len - sizeof(*req.in) - fixed;
		__atomic_fetch_add(&served_classic, 1, __ATOMIC_RELAXED);
		if (handle(&req))
			classic_reply(fd, &req);
	}
	free(buf);
	free(body);
	return NULL;
}

/* ---- the io_uring transport ---- */

struct ring_entry {
	struct uring_req_header header;
	struct iovec iov[2];
	uint32_t dirty;
	char *payload;
};

struct queue {
	int qid;
	int depth;
	int pin;
	unsigned setup_flags;
	struct io_uring ring;
	struct ring_entry *entries;
};

static int queue_cmd(struct queue *q, int index, uint32_t cmd_op, uint64_t commit_id)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
	if (!sqe)
		return -EBUSY;
	memset(sqe, 0, 128); /* an SQE128: the command area is the second half */
	struct ring_entry *e = &q->entries[index];
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = dev_fd;
	sqe->cmd_op = cmd_op;
	sqe->user_data = index;
	if (cmd_op == URING_CMD_REGISTER) {
		sqe->addr = (uintptr_t)e->iov;
		sqe->len = 2;
	}
	struct uring_cmd_req *cmd = (struct uring_cmd_req *)sqe->cmd;
	cmd->qid = q->qid;
	cmd->commit_id = commit_id;
	return 0;
}

/* Answers the request in ring entry index and asks for the next one. */
static void ring_serve(struct queue *q, int index)
{
	struct ring_entry *e = &q->entries[index];
	struct request req = {
		.in = (void *)e->header.in_out,
		.op = e->header.op_in,
		.payload = e->payload,
		.payload_len = e->header.ring_ent_in_out.payload_sz,
		.out_buf = e->payload,
		.out_cap = MAX_WRITE,
		.dirty = &e->dirty,
	};
	uint64_t unique = req.in->unique;
	uint64_t commit_id = e->header.ring_ent_in_out.commit_id;
	__atomic_fetch_add(&served_ring, 1, __ATOMIC_RELAXED);
	handle(&req); /* replies are built in the payload buffer */
	struct fuse_out_header *out = (void *)e->header.in_out;
	out->len = sizeof(*out) + (req.error ? 0 : req.out_len);
	out->error = req.error;
	out->unique = unique;
	e->header.ring_ent_in_out.payload_sz = req.error ? 0 : req.out_len;
	if (queue_cmd(q, index, URING_CMD_COMMIT_AND_FETCH, commit_id) < 0)
		fprintf(stderr, "queue %d: no free SQE\n", q->qid);
}

static void *ring_loop(void *arg)
{
	struct queue *q = arg;
	if (q->pin) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(q->qid, &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	/* Made here: a SINGLE_ISSUER ring belongs to the thread that made it. */
	int r = io_uring_queue_init(q->depth * 2, &q->ring, IORING_SETUP_SQE128 | q->setup_flags);
	if (r < 0) {
		fprintf(stderr, "queue %d: io_uring_queue_init: %s\n", q->qid, strerror(-r));
		return NULL;
	}
	for (int i = 0; i < q->depth; i++)
		queue_cmd(q, i, URING_CMD_REGISTER, 0);
	for (;;) {
		int r = io_uring_submit_and_wait(&q->ring, 1);
		if (r < 0 && r != -EINTR) {
			fprintf(stderr, "queue %d: io_uring_submit_and_wait: %s\n", q->qid, strerror(-r));
			break;
		}
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		int stop = 0;
		io_uring_for_each_cqe(&q->ring, head, cqe)
		{
			seen++;
			if (cqe->res < 0) {
				/* ENOTCONN/ECANCELED: the connection is being torn down. */
				if (cqe->res != -ENOTCONN && cqe->res != -ECANCELED)
					fprintf(stderr, "queue %d entry %llu: %s\n", q->qid,
						(unsigned long long)cqe->user_data, strerror(-cqe->res));
				stop = 1;
				continue;
			}
			ring_serve(q, (int)cqe->user_data);
		}
		io_uring_cq_advance(&q->ring, seen);
		if (stop)
			break;
	}
	return NULL;
}

static int possible_cpus(void)
{
	FILE *f = fopen("/sys/devices/system/cpu/possible", "r");
	int first = 0, last = 0;
	if (!f)
		return 1;
	if (fscanf(f, "%d-%d", &first, &last) < 2)
		last = first;
	fclose(f);
	return last + 1;
}

/* ---- set-up ---- */

static int answer_init(int ring)
{
	static char buf[CLASSIC_BUF];
	ssize_t n = read(dev_fd, buf, sizeof(buf));
	struct fuse_in_header *in = (void *)buf;
	if (n < (ssize_t)sizeof(*in) || in->opcode != FUSE_INIT) {
		fprintf(stderr, "expected FUSE_INIT\n");
		return -1;
	}
	struct fuse_init_in *init = (void *)(buf + sizeof(*in));
	uint64_t offered = init->flags | (init->flags & FUSE_INIT_EXT ? (uint64_t)init->flags2 << 32 : 0);
	uint64_t want = FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_MAX_PAGES | FUSE_ASYNC_DIO |
			FUSE_WRITEBACK_CACHE | FUSE_INIT_EXT;
	if (ring) {
		if (!(offered & ((uint64_t)OVER_IO_URING_FLAG2 << 32))) {
			fprintf(stderr, "the kernel does not offer FUSE_OVER_IO_URING "
					"(/sys/module/fuse/parameters/enable_uring)\n");
			return -1;
		}
		want |= (uint64_t)OVER_IO_URING_FLAG2 << 32;
	}
	want &= offered;
	struct {
		struct fuse_out_header h;
		struct fuse_init_out o;
	} r = {0};
	r.h.len = sizeof(r);
	r.h.unique = in->unique;
	r.o.major = FUSE_KERNEL_VERSION;
	r.o.minor = init->minor < 42 ? init->minor : 42;
	r.o.max_readahead = init->max_readahead;
	r.o.flags = (uint32_t)want;
	r.o.flags2 = (uint32_t)(want >> 32);
	r.o.max_background = 64;
	r.o.congestion_threshold = 48;
	r.o.max_write = MAX_WRITE;
	r.o.time_gran = 1;
	r.o.max_pages = MAX_PAGES;
	if (write(dev_fd, &r, sizeof(r)) < 0) {
		perror("init reply");
		return -1;
	}
	return 0;
}

static void set_read_ahead(const char *mountpoint)
{
	struct stat st;
	char path[64], value[16];
	if (stat(mountpoint, &st) < 0)
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev),
		 minor(st.st_dev));
	int fd = open(path, O_WRONLY);
	if (fd < 0)
		return;
	int len = snprintf(value, sizeof(value), "%d", READ_AHEAD_KB);
	if (write(fd, value, len) < 0)
		perror(path);
	close(fd);
}

int main(int argc, char **argv)
{
	const char *usage = "usage: nullfs_ring MOUNTPOINT [--ring] [--threads N] [--depth N] [--no-pin] "
			    "[--coop-taskrun | --defer-taskrun]\n";
	const char *mountpoint = NULL;
	int ring = 0, threads = 4, depth = 8, pin = 1;
	unsigned setup_flags = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--ring"))
			ring = 1;
		else if (!strcmp(argv[i], "--no-pin"))
			pin = 0;
		else if (!strcmp(argv[i], "--coop-taskrun"))
			setup_flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER;
		else if (!strcmp(argv[i], "--defer-taskrun"))
			setup_flags = IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SINGLE_ISSUER;
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--depth") && i + 1 < argc)
			depth = atoi(argv[++i]);
		else if (argv[i][0] != '-' && !mountpoint)
			mountpoint = argv[i];
		else {
			fputs(usage, stderr);
			return 2;
		}
	}
	if (!mountpoint || threads < 1 || depth < 1) {
		fputs(usage, stderr);
		return 2;
	}
	dev_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (dev_fd < 0) {
		perror("/dev/fuse");
		return 1;
	}
	char opts[128];
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", dev_fd);
	if (mount("null", mountpoint, ring ? "fuse.nullring" : "fuse.nullclassic", MS_NOSUID | MS_NODEV,
		  opts) < 0) {
		perror("mount");
		return 1;
	}
	if (answer_init(ring) < 0) {
		umount2(mountpoint, MNT_DETACH);
		return 1;
	}
	int n_queues = ring ? possible_cpus() : 0;
	pthread_t *tids = calloc(threads + n_queues, sizeof(*tids));
	struct queue *queues = calloc(n_queues ? n_queues : 1, sizeof(*queues));
	int n_tids = 0;
	for (int q = 0; q < n_queues; q++) {
		struct queue *queue = &queues[q];
		queue->qid = q;
		queue->depth = depth;
		queue->pin = pin;
		queue->setup_flags = setup_flags;
		queue->entries = calloc(depth, sizeof(*queue->entries));
		for (int i = 0; i < depth; i++) {
			struct ring_entry *e = &queue->entries[i];
			e->payload = aligned_alloc(4096, MAX_WRITE);
			memset(e->payload, 0, MAX_WRITE);
			e->iov[0] = (struct iovec){&e->header, sizeof(e->header)};
			e->iov[1] = (struct iovec){e->payload, MAX_WRITE};
		}
		pthread_create(&tids[n_tids++], NULL, ring_loop, queue);
	}
	/* Classic: `threads` readers on cloned descriptors (the first on the
	 * session's own). Ring: one reader for FORGET and INTERRUPT. */
	int readers = ring ? 1 : threads;
	for (int t = 0; t < readers; t++) {
		int fd = dev_fd;
		if (t > 0) {
			uint32_t source = dev_fd;
			fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
			if (fd < 0 || ioctl(fd, FUSE_DEV_IOC_CLONE, &source) < 0) {
				perror("FUSE_DEV_IOC_CLONE");
				return 1;
			}
		}
		pthread_create(&tids[n_tids++], NULL, classic_loop, (void *)(intptr_t)fd);
	}
	set_read_ahead(mountpoint);
	fprintf(stderr, "nullfs_ring: serving %s (%s)\n", mountpoint, ring ? "io_uring" : "read/writev");
	for (int t = 0; t < n_tids; t++)
		pthread_join(tids[t], NULL);
	fprintf(stderr, "nullfs_ring: requests served by read/writev %lu, by io_uring %lu\n",
		served_classic, served_ring);
	return 0;
}
