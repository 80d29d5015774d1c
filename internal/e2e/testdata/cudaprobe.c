/*
 * cudaprobe: a tiny CUDA driver API probe for nctk end-to-end tests.
 *
 * It is linked only against glibc and loads the driver at run time, so an
 * image built with it contains no NVIDIA files; whatever libcuda.so.1 it
 * finds was injected into the container.
 *
 * Usage: cudaprobe [init]
 *
 * Output (stdout, one "key: value" per line):
 *   libcuda: <path of the loaded libcuda.so.1>
 *   cuDriverGetVersion: <version>            (e.g. 12040 for CUDA 12.4)
 * with "init" also:
 *   cuInit: <CUresult>
 *   cuDeviceGetCount: <CUresult> count=<n>
 *
 * Exit status: 0 all calls returned CUDA_SUCCESS (0); 1 the library or a
 * symbol could not be loaded (the dlerror text goes to stderr, prefixed with
 * "cudaprobe: "); 2 a driver call returned an error; 64 bad usage.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

typedef int CUresult;
typedef CUresult (*cuDriverGetVersion_t)(int *);
typedef CUresult (*cuInit_t)(unsigned int);
typedef CUresult (*cuDeviceGetCount_t)(int *);

static void *sym(void *lib, const char *name)
{
	void *p;

	dlerror();
	p = dlsym(lib, name);
	if (p == NULL) {
		const char *err = dlerror();
		fprintf(stderr, "cudaprobe: dlsym %s: %s\n", name,
			err ? err : "symbol is NULL");
	}
	return p;
}

int main(int argc, char **argv)
{
	void *lib;
	struct link_map *lm = NULL;
	cuDriverGetVersion_t getVersion;
	CUresult rc;
	int version = 0;
	int status = 0;

	if (argc > 2 || (argc == 2 && strcmp(argv[1], "init") != 0)) {
		fprintf(stderr, "usage: %s [init]\n", argv[0]);
		return 64;
	}

	lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (lib == NULL) {
		fprintf(stderr, "cudaprobe: %s\n", dlerror());
		return 1;
	}
	if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm != NULL)
		printf("libcuda: %s\n", lm->l_name);

	getVersion = (cuDriverGetVersion_t)sym(lib, "cuDriverGetVersion");
	if (getVersion == NULL)
		return 1;
	rc = getVersion(&version);
	if (rc != 0) {
		printf("cuDriverGetVersion: error %d\n", rc);
		status = 2;
	} else {
		printf("cuDriverGetVersion: %d\n", version);
	}

	if (argc == 2) {
		cuInit_t init = (cuInit_t)sym(lib, "cuInit");
		cuDeviceGetCount_t getCount;
		int count = 0;

		if (init == NULL)
			return 1;
		getCount = (cuDeviceGetCount_t)sym(lib, "cuDeviceGetCount");
		if (getCount == NULL)
			return 1;
		rc = init(0);
		printf("cuInit: %d\n", rc);
		if (rc != 0)
			status = 2;
		rc = getCount(&count);
		printf("cuDeviceGetCount: %d count=%d\n", rc, count);
		if (rc != 0)
			status = 2;
	}
	fflush(stdout);
	return status;
}
