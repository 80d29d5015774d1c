//go:build cgo

package driverprobe

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// CUDA driver API subset (cuda.h). Types are declared here so that building
// nctk does not need the CUDA headers.
typedef int nctk_cu_result;
typedef int nctk_cu_device;
#define NCTK_CU_ATTR_CC_MAJOR 75
#define NCTK_CU_ATTR_CC_MINOR 76
#define NCTK_MAX_DEVICES 256

typedef struct {
	int major;
	int minor;
	int rc; // first failing call's result, 0 on success
	char bus_id[64];
} nctk_cu_dev;

typedef struct {
	int version_rc;
	int version;
	int init_rc;
	int count_rc;
	int count;
	long long dlopen_ns;
	nctk_cu_dev devs[NCTK_MAX_DEVICES];
	char err[512];
	char failed_call[64];
} nctk_cu_probe;

static long long nctk_now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void nctk_copy_err(char *dst, size_t n, const char *src) {
	if (src == NULL) {
		src = "unknown error";
	}
	snprintf(dst, n, "%s", src);
}

// nctk_cu_error_name returns the CUDA error name of rc via cuGetErrorName, or NULL.
static const char *nctk_cu_error_name(void *h, int rc) {
	typedef nctk_cu_result (*get_name_t)(nctk_cu_result, const char **);
	get_name_t get_name = (get_name_t)dlsym(h, "cuGetErrorName");
	const char *name = NULL;
	if (get_name == NULL || get_name(rc, &name) != 0) {
		return NULL;
	}
	return name;
}

// nctk_probe_cuda loads libcuda from path and asks it for the CUDA version
// it supports and, if cuInit succeeds, every device's compute capability and
// PCI bus id. The library handle is returned in *handle (kept open so that
// error names can be looked up), NULL if dlopen failed.
static void nctk_probe_cuda(const char *path, nctk_cu_probe *r, void **handle) {
	typedef nctk_cu_result (*version_t)(int *);
	typedef nctk_cu_result (*init_t)(unsigned int);
	typedef nctk_cu_result (*count_t)(int *);
	typedef nctk_cu_result (*get_t)(nctk_cu_device *, int);
	typedef nctk_cu_result (*attr_t)(int *, int, nctk_cu_device);
	typedef nctk_cu_result (*bus_t)(char *, int, nctk_cu_device);

	memset(r, 0, sizeof(*r));
	r->version_rc = r->init_rc = r->count_rc = -1;
	long long t0 = nctk_now_ns();
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	r->dlopen_ns = nctk_now_ns() - t0;
	*handle = h;
	if (h == NULL) {
		nctk_copy_err(r->err, sizeof(r->err), dlerror());
		snprintf(r->failed_call, sizeof(r->failed_call), "dlopen");
		return;
	}
	version_t get_version = (version_t)dlsym(h, "cuDriverGetVersion");
	init_t init = (init_t)dlsym(h, "cuInit");
	count_t count = (count_t)dlsym(h, "cuDeviceGetCount");
	get_t get = (get_t)dlsym(h, "cuDeviceGet");
	attr_t attr = (attr_t)dlsym(h, "cuDeviceGetAttribute");
	bus_t bus = (bus_t)dlsym(h, "cuDeviceGetPCIBusId");
	if (get_version == NULL || init == NULL || count == NULL || get == NULL || attr == NULL || bus == NULL) {
		snprintf(r->err, sizeof(r->err), "missing CUDA driver API symbol");
		snprintf(r->failed_call, sizeof(r->failed_call), "dlsym");
		return;
	}
	r->version_rc = get_version(&r->version);
	r->init_rc = init(0);
	if (r->init_rc != 0) {
		return;
	}
	r->count_rc = count(&r->count);
	if (r->count_rc != 0) {
		return;
	}
	if (r->count > NCTK_MAX_DEVICES) {
		r->count = NCTK_MAX_DEVICES;
	}
	for (int i = 0; i < r->count; i++) {
		nctk_cu_dev *d = &r->devs[i];
		nctk_cu_device dev;
		if ((d->rc = get(&dev, i)) != 0) {
			continue;
		}
		if ((d->rc = bus(d->bus_id, sizeof(d->bus_id), dev)) != 0) {
			continue;
		}
		if ((d->rc = attr(&d->major, NCTK_CU_ATTR_CC_MAJOR, dev)) != 0) {
			continue;
		}
		d->rc = attr(&d->minor, NCTK_CU_ATTR_CC_MINOR, dev);
	}
}

typedef struct {
	int init_rc;
	long long dlopen_ns;
	char err[512];
} nctk_nvml_probe;

typedef void *nctk_nvml_device;

static void *nctk_nvml_open(const char *path, nctk_nvml_probe *r) {
	typedef int (*init_t)(void);
	memset(r, 0, sizeof(*r));
	r->init_rc = -1;
	long long t0 = nctk_now_ns();
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	r->dlopen_ns = nctk_now_ns() - t0;
	if (h == NULL) {
		nctk_copy_err(r->err, sizeof(r->err), dlerror());
		return NULL;
	}
	init_t init = (init_t)dlsym(h, "nvmlInit_v2");
	if (init == NULL) {
		snprintf(r->err, sizeof(r->err), "missing symbol nvmlInit_v2");
		return h;
	}
	r->init_rc = init();
	return h;
}

// nctk_nvml_error returns nvmlErrorString(rc) or NULL.
static const char *nctk_nvml_error(void *h, int rc) {
	typedef const char *(*str_t)(int);
	str_t str = (str_t)dlsym(h, "nvmlErrorString");
	return str == NULL ? NULL : str(rc);
}

// nctk_nvml_brand returns the NVML brand enum of the GPU at bus_id in
// *brand, and the NVML return code.
static int nctk_nvml_brand(void *h, const char *bus_id, int *brand) {
	typedef int (*by_bus_t)(const char *, nctk_nvml_device *);
	typedef int (*brand_t)(nctk_nvml_device, int *);
	by_bus_t by_bus = (by_bus_t)dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
	brand_t get_brand = (brand_t)dlsym(h, "nvmlDeviceGetBrand");
	if (by_bus == NULL || get_brand == NULL) {
		return -1;
	}
	nctk_nvml_device dev = NULL;
	int rc = by_bus(bus_id, &dev);
	if (rc != 0) {
		return rc;
	}
	return get_brand(dev, brand);
}

typedef struct {
	int gi;
	int ci;
	char uuid[96];
} nctk_mig_dev;

#define NCTK_MAX_MIG 64

// nctk_nvml_mig reads the MIG mode of the GPU at bus_id and, when it is
// enabled, every MIG device's GPU/compute instance ids and UUID. It returns
// the NVML code of the first failing call (0 on success; 3, "not
// supported", for GPUs without MIG, which leaves *mode at -1).
static int nctk_nvml_mig(void *h, const char *bus_id, int *mode, nctk_mig_dev *devs, int *n) {
	typedef int (*by_bus_t)(const char *, nctk_nvml_device *);
	typedef int (*mig_mode_t)(nctk_nvml_device, unsigned int *, unsigned int *);
	typedef int (*max_t)(nctk_nvml_device, unsigned int *);
	typedef int (*by_index_t)(nctk_nvml_device, unsigned int, nctk_nvml_device *);
	typedef int (*id_t)(nctk_nvml_device, unsigned int *);
	typedef int (*uuid_t)(nctk_nvml_device, char *, unsigned int);
	by_bus_t by_bus = (by_bus_t)dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
	mig_mode_t get_mode = (mig_mode_t)dlsym(h, "nvmlDeviceGetMigMode");
	max_t get_max = (max_t)dlsym(h, "nvmlDeviceGetMaxMigDeviceCount");
	by_index_t by_index = (by_index_t)dlsym(h, "nvmlDeviceGetMigDeviceHandleByIndex");
	id_t gi_id = (id_t)dlsym(h, "nvmlDeviceGetGpuInstanceId");
	id_t ci_id = (id_t)dlsym(h, "nvmlDeviceGetComputeInstanceId");
	uuid_t get_uuid = (uuid_t)dlsym(h, "nvmlDeviceGetUUID");
	*mode = -1;
	*n = 0;
	if (by_bus == NULL || get_mode == NULL) {
		return 13; // NVML_ERROR_FUNCTION_NOT_FOUND
	}
	nctk_nvml_device dev = NULL;
	int rc = by_bus(bus_id, &dev);
	if (rc != 0) {
		return rc;
	}
	unsigned int current = 0, pending = 0;
	if ((rc = get_mode(dev, &current, &pending)) != 0) {
		return rc;
	}
	*mode = (int)current;
	if (current != 1) {
		return 0;
	}
	if (get_max == NULL || by_index == NULL || gi_id == NULL || ci_id == NULL || get_uuid == NULL) {
		return 13;
	}
	unsigned int max = 0;
	if ((rc = get_max(dev, &max)) != 0) {
		return rc;
	}
	for (unsigned int i = 0; i < max && *n < NCTK_MAX_MIG; i++) {
		nctk_nvml_device mig = NULL;
		rc = by_index(dev, i, &mig);
		if (rc == 6) { // NVML_ERROR_NOT_FOUND: no more MIG devices
			break;
		}
		if (rc != 0) {
			return rc;
		}
		nctk_mig_dev *m = &devs[*n];
		unsigned int gi = 0, ci = 0;
		if ((rc = gi_id(mig, &gi)) != 0 || (rc = ci_id(mig, &ci)) != 0 ||
		    (rc = get_uuid(mig, m->uuid, sizeof(m->uuid))) != 0) {
			return rc;
		}
		m->gi = (int)gi;
		m->ci = (int)ci;
		(*n)++;
	}
	return 0;
}

static void nctk_nvml_shutdown(void *h) {
	typedef int (*shutdown_t)(void);
	shutdown_t shutdown = (shutdown_t)dlsym(h, "nvmlShutdown");
	if (shutdown != NULL) {
		shutdown();
	}
}
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"
)

// haveCgo reports whether this build can load driver libraries.
const haveCgo = true

// runProbe does the work of the child process: it loads the driver's
// libraries into this process and asks them. It never returns an error:
// what failed is described in the result.
func runProbe(req Request) Result {
	var res Result
	start := time.Now()
	probeCUDA(req, &res)
	probeNVML(req, &res)
	res.ProbeDuration = time.Since(start)
	return res
}

// probeCUDA fills the libcuda part of res.
func probeCUDA(req Request, res *Result) {
	cpath := C.CString(req.Libcuda)
	defer C.free(unsafe.Pointer(cpath))
	var cr C.nctk_cu_probe
	var h unsafe.Pointer
	C.nctk_probe_cuda(cpath, &cr, &h)
	res.DlopenDuration = time.Duration(cr.dlopen_ns)
	cuErr := func(call string, rc C.int) string {
		name := ""
		if h != nil {
			if n := C.nctk_cu_error_name(h, rc); n != nil {
				name = C.GoString(n)
			}
		}
		if name == "" {
			return fmt.Sprintf("%s: CUDA error %d", call, int(rc))
		}
		return fmt.Sprintf("%s: %s (%d)", call, name, int(rc))
	}
	switch {
	case h == nil:
		res.CUDAError = fmt.Sprintf("dlopen %s: %s", req.Libcuda, C.GoString(&cr.err[0]))
		return
	case C.GoString(&cr.failed_call[0]) == "dlsym":
		res.CUDAError = fmt.Sprintf("%s: %s", req.Libcuda, C.GoString(&cr.err[0]))
		return
	}
	if cr.version_rc == 0 {
		res.CUDADriverVersion = int(cr.version)
	} else {
		res.CUDAError = cuErr("cuDriverGetVersion", cr.version_rc)
	}
	switch {
	case cr.init_rc != 0:
		res.DeviceError = cuErr("cuInit", cr.init_rc)
	case cr.count_rc != 0:
		res.DeviceError = cuErr("cuDeviceGetCount", cr.count_rc)
	default:
		for i := 0; i < int(cr.count); i++ {
			d := &cr.devs[i]
			dev := Device{Ordinal: i}
			if d.rc != 0 {
				dev.Error = cuErr(fmt.Sprintf("device %d", i), d.rc)
			} else {
				dev.BusID = normalizeBusID(C.GoString(&d.bus_id[0]))
				dev.Arch = fmt.Sprintf("%d.%d", int(d.major), int(d.minor))
			}
			res.Devices = append(res.Devices, dev)
		}
	}
}

// probeNVML fills the NVML part of res.
func probeNVML(req Request, res *Result) {
	if req.NVML == "" {
		return
	}
	npath := C.CString(req.NVML)
	defer C.free(unsafe.Pointer(npath))
	var nr C.nctk_nvml_probe
	nh := C.nctk_nvml_open(npath, &nr)
	switch {
	case nh == nil:
		res.NVMLError = fmt.Sprintf("dlopen %s: %s", req.NVML, C.GoString(&nr.err[0]))
		return
	case C.GoString(&nr.err[0]) != "":
		res.NVMLError = fmt.Sprintf("%s: %s", req.NVML, C.GoString(&nr.err[0]))
		return
	case nr.init_rc != 0:
		res.NVMLError = fmt.Sprintf("nvmlInit_v2: %s (%d)", nvmlError(nh, nr.init_rc), int(nr.init_rc))
		return
	}
	defer C.nctk_nvml_shutdown(nh)
	brands := map[string]string{}
	for _, bus := range req.BusIDs {
		cbus := C.CString(bus)
		var brand C.int
		rc := C.nctk_nvml_brand(nh, cbus, &brand)
		if rc != 0 {
			C.free(unsafe.Pointer(cbus))
			res.NVMLError = fmt.Sprintf("brand of %s: %s", bus, nvmlError(nh, rc))
			continue
		}
		brands[bus] = BrandName(int(brand))

		var mode, n C.int
		var devs [C.NCTK_MAX_MIG]C.nctk_mig_dev
		rc = C.nctk_nvml_mig(nh, cbus, &mode, &devs[0], &n)
		C.free(unsafe.Pointer(cbus))
		switch {
		case rc == 3 || rc == 13: // not supported / function not found: no MIG
		case rc != 0:
			res.NVMLError = fmt.Sprintf("MIG devices of %s: %s", bus, nvmlError(nh, rc))
		case mode >= 0:
			if res.MIG == nil {
				res.MIG = map[string]MIGInfo{}
			}
			info := MIGInfo{Enabled: mode == 1}
			for i := 0; i < int(n); i++ {
				info.Devices = append(info.Devices, MIGDevice{GI: int(devs[i].gi), CI: int(devs[i].ci), UUID: C.GoString(&devs[i].uuid[0])})
			}
			res.MIG[bus] = info
		}
	}
	res.Brands = brands
}

// nvmlError is nvmlErrorString(rc), or "NVML error <rc>" where the library
// has none.
func nvmlError(h unsafe.Pointer, rc C.int) string {
	if s := C.nctk_nvml_error(h, rc); s != nil {
		return C.GoString(s)
	}
	return fmt.Sprintf("NVML error %d", int(rc))
}
