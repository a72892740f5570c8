/*
 * create_files DIR N: creates N empty files in DIR (open O_CREAT|O_EXCL,
 * close), then removes them; prints "creates/s unlinks/s". The small-file
 * rate of a FUSE transport: every create is a LOOKUP and a CREATE, every
 * close a FLUSH and a RELEASE, every unlink an UNLINK.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 3 || atoi(argv[2]) < 1) {
		fputs("usage: create_files DIR N\n", stderr);
		return 2;
	}
	int n = atoi(argv[2]);
	char path[4096];
	double t0 = now();
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/f%08d", argv[1], i);
		int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
		if (fd < 0 || close(fd) < 0) {
			perror(path);
			return 1;
		}
	}
	double t1 = now();
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/f%08d", argv[1], i);
		if (unlink(path) < 0) {
			perror(path);
			return 1;
		}
	}
	double t2 = now();
	printf("%.0f %.0f\n", n / (t1 - t0), n / (t2 - t1));
	return 0;
}
