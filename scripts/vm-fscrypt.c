/*
 * vm-fscrypt: the few fscrypt and fs-verity ioctls the kernel VM tests use
 * (crates/cli/tests/kernel_vm.rs), built static by the test and copied into
 * the VM, whose initramfs has no fscryptctl or fsverity.
 *
 *   vm-fscrypt add-key MOUNT KEYFILE   adds a 64-byte raw v2 key; prints its identifier
 *   vm-fscrypt set-policy DIR ID       v2 policy: AES-256-XTS contents, AES-256-CTS names
 *   vm-fscrypt enable-verity FILE      fs-verity with SHA-256, 4 KiB blocks
 *   vm-fscrypt measure FILE            prints the fs-verity digest (hex)
 */
#include <fcntl.h>
#include <linux/fscrypt.h>
#include <linux/fsverity.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static int open_or_die(const char *path, int flags)
{
	int fd = open(path, flags);

	if (fd < 0) {
		perror(path);
		exit(1);
	}
	return fd;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void print_hex(const unsigned char *bytes, size_t len)
{
	for (size_t i = 0; i < len; i++)
		printf("%02x", bytes[i]);
	printf("\n");
}

static int add_key(const char *mount, const char *keyfile)
{
	struct {
		struct fscrypt_add_key_arg arg;
		unsigned char raw[64];
	} req;
	int fd = open_or_die(keyfile, O_RDONLY);

	memset(&req, 0, sizeof(req));
	if (read(fd, req.raw, sizeof(req.raw)) != sizeof(req.raw))
		die("reading 64 key bytes");
	close(fd);
	req.arg.key_spec.type = FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER;
	req.arg.raw_size = sizeof(req.raw);
	fd = open_or_die(mount, O_RDONLY);
	if (ioctl(fd, FS_IOC_ADD_ENCRYPTION_KEY, &req) != 0)
		die("FS_IOC_ADD_ENCRYPTION_KEY");
	print_hex(req.arg.key_spec.u.identifier, FSCRYPT_KEY_IDENTIFIER_SIZE);
	return 0;
}

static int set_policy(const char *dir, const char *id)
{
	struct fscrypt_policy_v2 policy = {
		.version = FSCRYPT_POLICY_V2,
		.contents_encryption_mode = FSCRYPT_MODE_AES_256_XTS,
		.filenames_encryption_mode = FSCRYPT_MODE_AES_256_CTS,
		.flags = FSCRYPT_POLICY_FLAGS_PAD_16,
	};
	int fd;

	if (strlen(id) != 2 * FSCRYPT_KEY_IDENTIFIER_SIZE) {
		fprintf(stderr, "identifier must be %d hex digits\n",
			2 * FSCRYPT_KEY_IDENTIFIER_SIZE);
		return 1;
	}
	for (int i = 0; i < FSCRYPT_KEY_IDENTIFIER_SIZE; i++)
		sscanf(id + 2 * i, "%2hhx", &policy.master_key_identifier[i]);
	fd = open_or_die(dir, O_RDONLY);
	if (ioctl(fd, FS_IOC_SET_ENCRYPTION_POLICY, &policy) != 0)
		die("FS_IOC_SET_ENCRYPTION_POLICY");
	return 0;
}

static int enable_verity(const char *file)
{
	struct fsverity_enable_arg arg = {
		.version = 1,
		.hash_algorithm = FS_VERITY_HASH_ALG_SHA256,
		.block_size = 4096,
	};
	int fd = open_or_die(file, O_RDONLY);

	if (ioctl(fd, FS_IOC_ENABLE_VERITY, &arg) != 0)
		die("FS_IOC_ENABLE_VERITY");
	return 0;
}

static int measure(const char *file)
{
	struct {
		struct fsverity_digest d;
		unsigned char digest[64];
	} req = { .d.digest_size = 64 };
	int fd = open_or_die(file, O_RDONLY);

	if (ioctl(fd, FS_IOC_MEASURE_VERITY, &req) != 0)
		die("FS_IOC_MEASURE_VERITY");
	print_hex(req.d.digest, req.d.digest_size);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "add-key"))
		return add_key(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "set-policy"))
		return set_policy(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "enable-verity"))
		return enable_verity(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "measure"))
		return measure(argv[2]);
	fprintf(stderr, "usage: see the comment at the top of vm-fscrypt.c\n");
	return 2;
}
