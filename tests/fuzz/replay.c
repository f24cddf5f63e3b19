/* replay.c - runs a fuzz target over files, so the committed corpus (and every past finding)
 * is a regression test in ordinary builds, without libFuzzer */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		perror(path);
		return 1;
	}
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0, n;
	uint8_t chunk[4096];
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
		if (len + n > cap) {
			cap = (len + n) * 2;
			uint8_t *nb = realloc(buf, cap);
			if (nb == NULL) {
				free(buf);
				fclose(f);
				return 1;
			}
			buf = nb;
		}
		memcpy(buf + len, chunk, n);
		len += n;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf ? buf : (const uint8_t *)"", len);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int files = 0;
	for (int i = 1; i < argc; i++) {
		/* Absolute paths: a target may change directory (fuzz_cli_args does). */
		char *abs = realpath(argv[i], NULL);
		if (abs == NULL) {
			perror(argv[i]);
			return 1;
		}
		argv[i] = abs;
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i]) != 0)
				return 1;
			files++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		struct dirent *e;
		while (d != NULL && (e = readdir(d)) != NULL) {
			if (e->d_name[0] == '.')
				continue;
			char path[4096];
			snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
			if (run_file(path) != 0) {
				closedir(d);
				return 1;
			}
			files++;
		}
		if (d != NULL)
			closedir(d);
	}
	printf("%d inputs replayed\n", files);
	return files > 0 ? 0 : 1;
}
