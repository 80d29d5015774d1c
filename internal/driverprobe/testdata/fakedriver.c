// A stand-in for the NVIDIA driver's libcuda.so and libnvidia-ml.so, built
// by the driverprobe tests with gcc. Behaviour is chosen at compile time:
//   -DFAKE_CRASH  cuDriverGetVersion dies with SIGSEGV
//   -DFAKE_HANG   cuDriverGetVersion never returns
//   -DFAKE_NOGPU  cuInit fails like a host without the kernel driver
// The fake has two GPUs: bus 0000:41:00.0 (9.0, Tesla, MIG enabled with
// two devices) and 0000:01:00.0 (8.9, GeForce, no MIG); CUDA enumerates the
// faster one (41) first.
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cuDriverGetVersion(int *v) {
#ifdef FAKE_CRASH
	raise(SIGSEGV);
#endif
#ifdef FAKE_HANG
	for (;;) pause();
#endif
	*v = 12020;
	return 0;
}

int cuGetErrorName(int rc, const char **name) {
	switch (rc) {
	case 100: *name = "CUDA_ERROR_NO_DEVICE"; return 0;
	case 101: *name = "CUDA_ERROR_INVALID_DEVICE"; return 0;
	}
	return 1;
}

int cuInit(unsigned flags) {
	(void)flags;
#ifdef FAKE_NOGPU
	return 100;
#endif
	return 0;
}

int cuDeviceGetCount(int *n) { *n = 2; return 0; }
int cuDeviceGet(int *d, int i) { if (i < 0 || i > 1) return 101; *d = i; return 0; }

int cuDeviceGetAttribute(int *v, int attr, int dev) {
	static const int cc[2][2] = {{9, 0}, {8, 9}};
	if (attr == 75) { *v = cc[dev][0]; return 0; }
	if (attr == 76) { *v = cc[dev][1]; return 0; }
	return 1;
}

int cuDeviceGetPCIBusId(char *buf, int len, int dev) {
	snprintf(buf, len, dev == 0 ? "0000:41:00.0" : "0000:01:00.0");
	return 0;
}

// NVML
int nvmlInit_v2(void) {
#ifdef FAKE_NOGPU
	return 9; // NVML_ERROR_DRIVER_NOT_LOADED
#endif
	return 0;
}
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int rc) { return rc == 9 ? "Driver Not Loaded" : "Not Found"; }
int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev) {
	if (strcasecmp(bus, "00000000:41:00.0") == 0) { *dev = (void *)1; return 0; }
	if (strcasecmp(bus, "00000000:01:00.0") == 0) { *dev = (void *)2; return 0; }
	return 6; // NVML_ERROR_NOT_FOUND
}
int nvmlDeviceGetBrand(void *dev, int *brand) { *brand = dev == (void *)1 ? 2 : 5; return 0; }

// MIG: the GPU at 41 (handle 1) has MIG enabled with two devices (handles
// 11 and 12); the one at 01 does not support MIG.
int nvmlDeviceGetMigMode(void *dev, unsigned *current, unsigned *pending) {
	if (dev != (void *)1) return 3; // NVML_ERROR_NOT_SUPPORTED
	*current = *pending = 1;
	return 0;
}
int nvmlDeviceGetMaxMigDeviceCount(void *dev, unsigned *n) { (void)dev; *n = 7; return 0; }
int nvmlDeviceGetMigDeviceHandleByIndex(void *dev, unsigned i, void **mig) {
	(void)dev;
	if (i >= 2) return 6; // NVML_ERROR_NOT_FOUND
	*mig = (void *)(11 + (long)i);
	return 0;
}
int nvmlDeviceGetGpuInstanceId(void *mig, unsigned *id) { *id = mig == (void *)11 ? 1 : 2; return 0; }
int nvmlDeviceGetComputeInstanceId(void *mig, unsigned *id) { (void)mig; *id = 0; return 0; }
int nvmlDeviceGetUUID(void *mig, char *buf, unsigned len) {
	snprintf(buf, len, "MIG-%08lx-0000-0000-0000-000000000000", (long)mig);
	return 0;
}
