/*
 * fakenvml.c - a fake libnvidia-ml.so.1 for tests on machines without a GPU.
 *
 * Built by gputest.Build against go-nvml's own nvml.h, so every type and
 * prototype here is checked against the header go-nvml was generated from.
 *
 * Model (docs/design.md#gpu-confirmation): device N is the file $FAKE_NVML_ROOT/nvidiaN, and a
 * process has a compute context on device N exactly while it has that file
 * open, the way CUDA keeps /dev/nvidiaN open. Holders are found by reading the
 * /proc/<pid>/fd/<fd> links; entries that cannot be read are skipped.
 *
 * A holder may register its memory in $FAKE_NVML_ROOT/ctx/<pid>.<N> (decimal
 * bytes, written atomically by holder.py after it opened the device). A
 * registered holder that has gone (exited or closed the file) stays listed
 * for FAKE_NVML_RELEASE_MS after the first observer noticed: that observer
 * stamps ctx/<pid>.<N>.gone (O_CREAT|O_EXCL, CLOCK_REALTIME in ms), so every
 * process loading the fake agrees on when the release happens. Expired
 * entries are removed by whoever sees them expire. Unregistered holders are
 * released as soon as they close the file.
 *
 * Knobs, read by the nvmlInit* call that takes the init refcount 0 -> 1:
 *   FAKE_NVML_ROOT          device files and ctx/; unset or missing: nvmlInit
 *                           returns NVML_ERROR_DRIVER_NOT_LOADED
 *   FAKE_NVML_LOG           append one line per API call: "<symbol> [k=v ...] ret=<code>"
 *   FAKE_NVML_INIT_FAIL     nvmlInit* returns this nvmlReturn_t
 *   FAKE_NVML_RELEASE_MS    release delay of gone registered holders; -1 never (default 0)
 *   FAKE_NVML_PID_OFFSET    added to every reported pid (a PID namespace)
 *   FAKE_NVML_HOST_PROC     the host's /proc, bind-mounted where a pod can
 *                           read it: every pid is reported as the host knows
 *                           it, as the driver does for a process in a
 *                           container (whose own /proc cannot tell)
 *   FAKE_NVML_MEM_UNAVAILABLE=1  usedGpuMemory is NVML_VALUE_NOT_AVAILABLE
 *   FAKE_NVML_DEFAULT_MEM   bytes of an unregistered holder (default 256 MiB)
 *   FAKE_NVML_TOTAL_MEM     bytes per device (default 141 GiB)
 *   FAKE_NVML_PERSISTENCE   0 or 1 (default 1)
 *   FAKE_NVML_MIG=N:K[,N:K...]  device N is in MIG mode with K MIG devices
 *                           (1..7; each N once, N < the device count)
 * A malformed knob makes nvmlInit* print the reason on stderr and return
 * NVML_ERROR_UNKNOWN: a test that mistypes a knob must not silently pass.
 *
 * Built with -DFAKE_NVML_NO_V3 the *_v3 process-list symbols are left out,
 * as in a driver that predates them.
 *
 * MIG: a device named by FAKE_NVML_MIG has MIG devices 0..K-1 (the index of
 * nvmlDeviceGetMigDeviceHandleByIndex). A process holds MIG device k of
 * device N exactly while it has $FAKE_NVML_ROOT/nvidiaN-migk open, and
 * registers its memory in ctx/<pid>.N-migk (release and .gone stamps as for
 * a whole device). Such a process is also listed in device N's process lists,
 * as NVML lists MIG processes on the parent, with gpuInstanceId k and
 * computeInstanceId 0 (whole-device holders have 0xFFFFFFFF for both), and
 * counted in device N's used memory. nvmlDeviceGetMigMode answers SUCCESS
 * for every device: current = pending = NVML_DEVICE_MIG_ENABLE for a MIG
 * device, NVML_DEVICE_MIG_DISABLE otherwise (a MIG-capable GPU with MIG
 * off). nvmlDeviceGetMaxMigDeviceCount is 7 on a MIG-mode device (as on
 * A100/H100) and NOT_SUPPORTED otherwise; nvmlDeviceGetMigDeviceHandleByIndex
 * gives a handle for index < K, NOT_FOUND for K <= index < 7,
 * INVALID_ARGUMENT beyond, NOT_SUPPORTED on a device not in MIG mode. MIG
 * handles answer nvmlDeviceGetUUID ("MIG-fa4e00NN-00KK-0000-0000-000000000000",
 * NN the device index, KK the MIG index, two lowercase hex digits each),
 * nvmlDeviceGetName ("Fake NVIDIA H200 MIG <7/K>g.<total/K in GiB>gb"),
 * nvmlDeviceGetMemoryInfo (total = device total / K, used = its holders'
 * memory), nvmlDeviceIsMigDeviceHandle and
 * nvmlDeviceGetDeviceHandleFromMigDeviceHandle; every other device query
 * takes whole-device handles only (INVALID_ARGUMENT). Built with
 * -DFAKE_NVML_NO_MIG the five MIG functions are left out, as in a driver
 * before MIG (the knob and the files still work as above).
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1 /* declare nvmlInit as well as nvmlInit_v2 */
#include "nvml.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEVICES 64
#define MAX_MIG 7 /* MIG devices per GPU, as on A100/H100 */
#define NO_INSTANCE 0xFFFFFFFFu /* gpuInstanceId of a process not on a MIG device */
#define MIB (1024ULL * 1024ULL)

struct nvmlDevice_st {
	unsigned int index; /* the device's, for a MIG device its parent's */
	unsigned int mig;   /* 0: the whole device; k+1: its MIG device k */
};

/* cfg is written only by the init that takes refcount 0 -> 1, under
 * init_lock, before refcount is published; API calls only read it. */
static struct {
	char root[PATH_MAX]; /* realpath of FAKE_NVML_ROOT */
	unsigned int count;
	unsigned long long default_mem, total_mem;
	long long release_ms;
	unsigned int pid_offset;
	char host_proc[PATH_MAX];
	int mem_unavailable;
	int persistence;
	unsigned int mig[MAX_DEVICES]; /* MIG devices of each device; 0: not in MIG mode */
} cfg;

static struct nvmlDevice_st devices[MAX_DEVICES];
static struct nvmlDevice_st mig_devices[MAX_DEVICES * MAX_MIG]; /* device N's k: N*MAX_MIG+k */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int refcount; /* atomic; changed under init_lock */
static int log_fd = -1;

static int initialized(void)
{
	return __atomic_load_n(&refcount, __ATOMIC_ACQUIRE) > 0;
}

/* traced appends "<fn> <args> ret=<ret>" to FAKE_NVML_LOG with one write,
 * so lines from concurrent callers never interleave, and returns ret. */
static nvmlReturn_t traced(const char *fn, nvmlReturn_t ret, const char *fmt, ...)
{
	char line[256];
	int n;
	va_list ap;

	if (log_fd < 0)
		return ret;
	n = snprintf(line, sizeof line, "%s", fn);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof line - n, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof line)
		return ret; /* cannot happen with our short lines; never write a torn one */
	n += snprintf(line + n, sizeof line - n, " ret=%d\n", ret);
	if (n < (int)sizeof line && write(log_fd, line, n) < 0) {
		/* Losing a log line must not change what the API returns. */
	}
	return ret;
}

/* env_num parses knob name into *out when it is set, within min..max. */
static int env_num(const char *name, long long min, long long max, long long *out)
{
	const char *s = getenv(name);
	char *end;
	long long v;

	if (s == NULL || *s == '\0')
		return 0;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max) {
		fprintf(stderr, "fakenvml: bad %s=%s (want %lld..%lld)\n", name, s, min, max);
		return -1;
	}
	*out = v;
	return 0;
}

/* host_pid is pid (of this PID namespace) as the host knows it: the entry
 * of FAKE_NVML_HOST_PROC in the same PID namespace as this process whose
 * NSpid ends with pid. pid itself when there is no host /proc or no match. */
static unsigned int host_pid(unsigned int pid)
{
	char path[PATH_MAX + 64], line[256], self_ns[64], ns[64];
	unsigned int host = pid;
	struct dirent *e;
	ssize_t n;
	DIR *d;

	if (cfg.host_proc[0] == '\0')
		return pid;
	if ((n = readlink("/proc/self/ns/pid", self_ns, sizeof self_ns - 1)) < 0)
		return pid;
	self_ns[n] = '\0';
	if ((d = opendir(cfg.host_proc)) == NULL)
		return pid;
	while (host == pid && (e = readdir(d)) != NULL) {
		unsigned int cand, last = 0;
		FILE *f;
		char *tok, *save;

		if (sscanf(e->d_name, "%u", &cand) != 1)
			continue;
		snprintf(path, sizeof path, "%s/%u/ns/pid", cfg.host_proc, cand);
		if ((n = readlink(path, ns, sizeof ns - 1)) < 0)
			continue;
		ns[n] = '\0';
		if (strcmp(ns, self_ns) != 0)
			continue;
		snprintf(path, sizeof path, "%s/%u/status", cfg.host_proc, cand);
		if ((f = fopen(path, "re")) == NULL)
			continue;
		while (fgets(line, sizeof line, f) != NULL) {
			if (strncmp(line, "NSpid:", 6) != 0)
				continue;
			for (tok = strtok_r(line + 6, " \t\n", &save); tok != NULL; tok = strtok_r(NULL, " \t\n", &save))
				last = (unsigned int)strtoul(tok, NULL, 10);
			break;
		}
		fclose(f);
		if (last == pid)
			host = cand;
	}
	closedir(d);
	return host;
}

static int parse_uint(const char *s, const char *end, unsigned long long *out);

/* env_mig parses FAKE_NVML_MIG=N:K[,N:K...] into mig (zeroed first). */
static int env_mig(unsigned int mig[MAX_DEVICES])
{
	const char *s = getenv("FAKE_NVML_MIG"), *p = s;

	memset(mig, 0, MAX_DEVICES * sizeof *mig);
	if (s == NULL || *s == '\0')
		return 0;
	for (;;) {
		const char *colon = strchr(p, ':'), *end = strchr(p, ',');
		unsigned long long n, k;

		if (end == NULL)
			end = p + strlen(p);
		if (colon == NULL || colon > end || parse_uint(p, colon, &n) != 0 ||
		    parse_uint(colon + 1, end, &k) != 0 || n >= MAX_DEVICES || k < 1 || k > MAX_MIG ||
		    mig[n] != 0) {
			fprintf(stderr, "fakenvml: bad FAKE_NVML_MIG=%s (want N:K[,N:K...], K 1..%d, each N once)\n",
				s, MAX_MIG);
			return -1;
		}
		mig[n] = (unsigned int)k;
		if (*end == '\0')
			return 0;
		p = end + 1;
	}
}

static nvmlReturn_t load_config(void)
{
	const char *root = getenv("FAKE_NVML_ROOT");
	long long fail = 0, release = 0, offset = 0, unavailable = 0, persistence = 1;
	const char *host_proc = getenv("FAKE_NVML_HOST_PROC");
	long long default_mem = 256 * MIB, total_mem = 141 * 1024 * MIB;
	char path[PATH_MAX + 32];

	if (env_num("FAKE_NVML_INIT_FAIL", 0, NVML_ERROR_UNKNOWN, &fail) != 0 ||
	    env_num("FAKE_NVML_RELEASE_MS", -1, LLONG_MAX / 2, &release) != 0 ||
	    env_num("FAKE_NVML_PID_OFFSET", 0, UINT_MAX, &offset) != 0 ||
	    env_num("FAKE_NVML_MEM_UNAVAILABLE", 0, 1, &unavailable) != 0 ||
	    env_num("FAKE_NVML_PERSISTENCE", 0, 1, &persistence) != 0 ||
	    env_num("FAKE_NVML_DEFAULT_MEM", 0, LLONG_MAX, &default_mem) != 0 ||
	    env_num("FAKE_NVML_TOTAL_MEM", 0, LLONG_MAX, &total_mem) != 0 ||
	    env_mig(cfg.mig) != 0)
		return NVML_ERROR_UNKNOWN;
	if (fail != 0)
		return (nvmlReturn_t)fail;
	/* No root is the fake's "no driver": the kernel must still work. */
	if (root == NULL || realpath(root, cfg.root) == NULL)
		return NVML_ERROR_DRIVER_NOT_LOADED;

	cfg.release_ms = release;
	cfg.pid_offset = (unsigned int)offset;
	cfg.host_proc[0] = '\0';
	if (host_proc != NULL && *host_proc != '\0' && realpath(host_proc, cfg.host_proc) == NULL) {
		fprintf(stderr, "fake NVML: FAKE_NVML_HOST_PROC=%s: %s\n", host_proc, strerror(errno));
		return NVML_ERROR_UNKNOWN;
	}
	cfg.mem_unavailable = (int)unavailable;
	cfg.persistence = (int)persistence;
	cfg.default_mem = (unsigned long long)default_mem;
	cfg.total_mem = (unsigned long long)total_mem;
	for (cfg.count = 0; cfg.count < MAX_DEVICES; cfg.count++) {
		snprintf(path, sizeof path, "%s/nvidia%u", cfg.root, cfg.count);
		if (access(path, F_OK) != 0)
			break;
		devices[cfg.count].index = cfg.count;
	}
	for (unsigned int n = 0; n < MAX_DEVICES; n++) {
		if (cfg.mig[n] != 0 && n >= cfg.count) {
			fprintf(stderr, "fakenvml: bad FAKE_NVML_MIG: no device %u (there are %u)\n", n, cfg.count);
			return NVML_ERROR_UNKNOWN;
		}
		for (unsigned int k = 0; k < MAX_MIG; k++) {
			mig_devices[n * MAX_MIG + k].index = n;
			mig_devices[n * MAX_MIG + k].mig = k + 1;
		}
	}
	return NVML_SUCCESS;
}

static nvmlReturn_t init(const char *fn, const char *args)
{
	nvmlReturn_t ret = NVML_SUCCESS;
	const char *log;

	pthread_mutex_lock(&init_lock);
	if (refcount == 0) {
		log = getenv("FAKE_NVML_LOG");
		if (log != NULL && *log != '\0')
			log_fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		ret = load_config();
	}
	if (ret == NVML_SUCCESS)
		__atomic_store_n(&refcount, refcount + 1, __ATOMIC_RELEASE);
	traced(fn, ret, "%s", args);
	if (refcount == 0 && log_fd >= 0) {
		close(log_fd);
		log_fd = -1;
	}
	pthread_mutex_unlock(&init_lock);
	return ret;
}

nvmlReturn_t nvmlInit(void) { return init(__func__, ""); }
nvmlReturn_t nvmlInit_v2(void) { return init(__func__, ""); }

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	char args[32];

	snprintf(args, sizeof args, " flags=%u", flags);
	return init(__func__, args);
}

nvmlReturn_t nvmlShutdown(void)
{
	nvmlReturn_t ret = NVML_ERROR_UNINITIALIZED;

	pthread_mutex_lock(&init_lock);
	if (refcount > 0) {
		__atomic_store_n(&refcount, refcount - 1, __ATOMIC_RELEASE);
		ret = traced(__func__, NVML_SUCCESS, "");
		if (refcount == 0 && log_fd >= 0) {
			close(log_fd);
			log_fd = -1;
		}
	}
	pthread_mutex_unlock(&init_lock);
	return ret;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
	case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT: return "Timeout";
	case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
	case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
	case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
	case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
	case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
	case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
	case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request";
	case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch";
	case NVML_ERROR_IN_USE: return "In use by another client";
	case NVML_ERROR_MEMORY: return "Insufficient Memory";
	case NVML_ERROR_NO_DATA: return "No data";
	case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "The requested vgpu operation is not available on target device, because ECC is enabled";
	case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Ran out of critical resources, other than memory";
	case NVML_ERROR_FREQ_NOT_SUPPORTED: return "The requested frequency is not supported";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "The provided version is invalid/unsupported";
	case NVML_ERROR_DEPRECATED: return "The requested functionality has been deprecated";
	case NVML_ERROR_NOT_READY: return "The system is not ready for the request";
	case NVML_ERROR_GPU_NOT_FOUND: return "No GPUs were found";
	case NVML_ERROR_INVALID_STATE: return "Resource not in correct state to perform requested operation";
	case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset not supported for given device/parameters";
	case NVML_ERROR_UNKNOWN: return "Unknown Error";
	}
	return "Unknown Error";
}

/* ---- system queries ---------------------------------------------------- */

static nvmlReturn_t copy_string(const char *fn, char *dst, unsigned int length, const char *src)
{
	if (!initialized())
		return traced(fn, NVML_ERROR_UNINITIALIZED, "");
	if (dst == NULL)
		return traced(fn, NVML_ERROR_INVALID_ARGUMENT, "");
	if (length < strlen(src) + 1)
		return traced(fn, NVML_ERROR_INSUFFICIENT_SIZE, " length=%u", length);
	strcpy(dst, src);
	return traced(fn, NVML_SUCCESS, "");
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	return copy_string(__func__, version, length, "999.99-fake");
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
	return copy_string(__func__, version, length, "12.999.99-fake");
}

static nvmlReturn_t cuda_version(const char *fn, int *version)
{
	if (!initialized())
		return traced(fn, NVML_ERROR_UNINITIALIZED, "");
	if (version == NULL)
		return traced(fn, NVML_ERROR_INVALID_ARGUMENT, "");
	*version = 12080; /* CUDA 12.8, encoded as 1000*major + 10*minor */
	return traced(fn, NVML_SUCCESS, "");
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return cuda_version(__func__, v); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return cuda_version(__func__, v); }

/* ---- devices ------------------------------------------------------------ */

static void format_uuid(char *buf, size_t len, unsigned int index)
{
	snprintf(buf, len, "GPU-fa4e0000-0000-0000-0000-0000000000%02x", index);
}

/* device_index validates a handle; it returns -1 for one we did not hand out.
 * (In this nvml.h nvmlDevice_t is a struct wrapping the opaque pointer.) */
static int device_index(nvmlDevice_t device, unsigned int *index)
{
	const struct nvmlDevice_st *d = device.handle;

	if (d == NULL || d < devices || d >= devices + cfg.count)
		return -1;
	*index = d->index;
	return 0;
}

/* any_handle validates a whole-device or MIG handle: index is the (parent)
 * device, mig 0 for a whole device and k+1 for its MIG device k. */
static int any_handle(nvmlDevice_t device, unsigned int *index, unsigned int *mig)
{
	const struct nvmlDevice_st *d = device.handle;

	if (device_index(device, index) == 0) {
		*mig = 0;
		return 0;
	}
	if (d == NULL || d < mig_devices || d >= mig_devices + MAX_DEVICES * MAX_MIG ||
	    d->index >= cfg.count || d->mig == 0 || d->mig > cfg.mig[d->index])
		return -1;
	*index = d->index;
	*mig = d->mig;
	return 0;
}

/* who is the log's name of a handle: " dev=N", or " dev=N mig=k". */
static const char *who(char *buf, size_t len, unsigned int index, unsigned int mig)
{
	if (mig == 0)
		snprintf(buf, len, " dev=%u", index);
	else
		snprintf(buf, len, " dev=%u mig=%u", index, mig - 1);
	return buf;
}

static nvmlReturn_t device_count(const char *fn, unsigned int *count)
{
	if (!initialized())
		return traced(fn, NVML_ERROR_UNINITIALIZED, "");
	if (count == NULL)
		return traced(fn, NVML_ERROR_INVALID_ARGUMENT, "");
	*count = cfg.count;
	return traced(fn, NVML_SUCCESS, " n=%u", cfg.count);
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return device_count(__func__, n); }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { return device_count(__func__, n); }

static nvmlReturn_t handle_by_index(const char *fn, unsigned int index, nvmlDevice_t *device)
{
	if (!initialized())
		return traced(fn, NVML_ERROR_UNINITIALIZED, "");
	if (device == NULL || index >= cfg.count)
		return traced(fn, NVML_ERROR_INVALID_ARGUMENT, " dev=%u", index);
	device->handle = &devices[index];
	return traced(fn, NVML_SUCCESS, " dev=%u", index);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) { return handle_by_index(__func__, i, d); }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) { return handle_by_index(__func__, i, d); }

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	char want[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	unsigned int i;

	if (!initialized())
		return traced(__func__, NVML_ERROR_UNINITIALIZED, "");
	if (uuid == NULL || device == NULL)
		return traced(__func__, NVML_ERROR_INVALID_ARGUMENT, "");
	for (i = 0; i < cfg.count; i++) {
		format_uuid(want, sizeof want, i);
		if (strcmp(uuid, want) == 0) {
			device->handle = &devices[i];
			return traced(__func__, NVML_SUCCESS, " dev=%u", i);
		}
	}
	return traced(__func__, NVML_ERROR_NOT_FOUND, "");
}

/* DEVICE_QUERY opens a device getter: checks init, the handle and the out
 * pointer, leaving the validated index in idx. */
#define DEVICE_QUERY(device, out)                                             \
	unsigned int idx;                                                     \
	if (!initialized())                                                   \
		return traced(__func__, NVML_ERROR_UNINITIALIZED, "");        \
	if (device_index(device, &idx) != 0 || (out) == NULL)                 \
		return traced(__func__, NVML_ERROR_INVALID_ARGUMENT, "")

/* ANY_QUERY is DEVICE_QUERY for getters that MIG handles answer too,
 * leaving the device in idx and the MIG device (0 or k+1) in mig. */
#define ANY_QUERY(device, out)                                                \
	unsigned int idx, mig;                                                \
	char whom[48];                                                        \
	if (!initialized())                                                   \
		return traced(__func__, NVML_ERROR_UNINITIALIZED, "");        \
	if (any_handle(device, &idx, &mig) != 0 || (out) == NULL)            \
		return traced(__func__, NVML_ERROR_INVALID_ARGUMENT, "");     \
	who(whom, sizeof whom, idx, mig)

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	DEVICE_QUERY(device, index);
	*index = idx;
	return traced(__func__, NVML_SUCCESS, " dev=%u", idx);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
	DEVICE_QUERY(device, minor);
	*minor = idx; /* /dev/nvidiaN has minor N */
	return traced(__func__, NVML_SUCCESS, " dev=%u", idx);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE];

	ANY_QUERY(device, uuid);
	if (mig == 0)
		format_uuid(buf, sizeof buf, idx);
	else
		snprintf(buf, sizeof buf, "MIG-fa4e00%02x-00%02x-0000-0000-000000000000", idx, mig - 1);
	if (length < strlen(buf) + 1)
		return traced(__func__, NVML_ERROR_INSUFFICIENT_SIZE, "%s length=%u", whom, length);
	strcpy(uuid, buf);
	return traced(__func__, NVML_SUCCESS, "%s", whom);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];

	ANY_QUERY(device, name);
	if (mig == 0)
		snprintf(buf, sizeof buf, "Fake NVIDIA H200");
	else
		snprintf(buf, sizeof buf, "Fake NVIDIA H200 MIG %ug.%llugb", MAX_MIG / cfg.mig[idx],
			 (cfg.total_mem / cfg.mig[idx]) >> 30);
	if (length < strlen(buf) + 1)
		return traced(__func__, NVML_ERROR_INSUFFICIENT_SIZE, "%s length=%u", whom, length);
	strcpy(name, buf);
	return traced(__func__, NVML_SUCCESS, "%s", whom);
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
	DEVICE_QUERY(device, mode);
	*mode = cfg.persistence ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	return traced(__func__, NVML_SUCCESS, " dev=%u", idx);
}

/* ---- holders ------------------------------------------------------------ */

struct proc {
	unsigned int pid;
	unsigned long long mem;
	unsigned int gi; /* the MIG device held (gpuInstanceId), or NO_INSTANCE */
};

struct procs {
	struct proc *v;
	size_t n, cap;
};

static int procs_add(struct procs *p, unsigned int pid, unsigned long long mem)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 16;
		struct proc *v = realloc(p->v, cap * sizeof *v);

		if (v == NULL)
			return -1;
		p->v = v;
		p->cap = cap;
	}
	p->v[p->n].pid = pid;
	p->v[p->n].mem = mem;
	p->v[p->n].gi = NO_INSTANCE;
	p->n++;
	return 0;
}

static int procs_has(const struct procs *p, unsigned int pid)
{
	for (size_t i = 0; i < p->n; i++)
		if (p->v[i].pid == pid)
			return 1;
	return 0;
}

static int by_pid(const void *a, const void *b)
{
	const struct proc *p = a, *q = b;

	if (p->pid != q->pid)
		return (p->pid > q->pid) - (p->pid < q->pid);
	return (p->gi > q->gi) - (p->gi < q->gi);
}

/* parse_uint parses a whole decimal string (no sign, no trailing bytes). */
static int parse_uint(const char *s, const char *end, unsigned long long *out)
{
	unsigned long long v = 0;

	if (s == end)
		return -1;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9' || v > (ULLONG_MAX - 9) / 10)
			return -1;
		v = v * 10 + (unsigned long long)(*s - '0');
	}
	*out = v;
	return 0;
}

/* read_number reads a file holding one decimal number (a trailing newline is fine). */
static int read_number(const char *path, unsigned long long *out)
{
	char buf[32];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	if (buf[n - 1] == '\n')
		n--;
	return parse_uint(buf, buf + n, out);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* target is what a holder holds: a whole device (mig 0) or its MIG device
 * mig-1. Its files are named after target_name: nvidia<name> and
 * ctx/<pid>.<name>. */
struct target {
	unsigned int dev, mig;
};

/* target_name is "N" for a whole device, "N-migk" for its MIG device k. */
static const char *target_name(char *buf, size_t len, struct target t)
{
	if (t.mig == 0)
		snprintf(buf, len, "%u", t.dev);
	else
		snprintf(buf, len, "%u-mig%u", t.dev, t.mig - 1);
	return buf;
}

/* registered collects the pids with a ctx/<pid>.<name> file of target t
 * (mem is unused). */
static int registered(struct target t, struct procs *out)
{
	char path[PATH_MAX + 8], name[32];
	struct dirent *e;
	DIR *d;
	int rc = 0;

	target_name(name, sizeof name, t);
	snprintf(path, sizeof path, "%s/ctx", cfg.root);
	if ((d = opendir(path)) == NULL)
		return 0; /* no ctx/: nobody registered */
	while (rc == 0 && (e = readdir(d)) != NULL) {
		const char *dot = strchr(e->d_name, '.');
		unsigned long long pid, n;

		if (dot == NULL || parse_uint(e->d_name, dot, &pid) != 0 || pid > UINT_MAX)
			continue; /* temporaries */
		if (t.mig == 0 ? parse_uint(dot + 1, dot + strlen(dot), &n) != 0 || n != t.dev
			       : strcmp(dot + 1, name) != 0)
			continue; /* .gone stamps, other devices and MIG devices */
		rc = procs_add(out, (unsigned int)pid, 0);
	}
	closedir(d);
	return rc;
}

/* holds reports whether process pid has the file target open. */
static int holds(unsigned int pid, const char *target)
{
	char path[64], link[PATH_MAX];
	struct dirent *e;
	int found = 0;
	DIR *d;

	snprintf(path, sizeof path, "/proc/%u/fd", pid);
	if ((d = opendir(path)) == NULL)
		return 0; /* gone, a zombie, or not ours to read */
	while (!found && (e = readdir(d)) != NULL) {
		ssize_t n = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);

		if (n > 0) {
			link[n] = '\0';
			found = strcmp(link, target) == 0;
		}
	}
	closedir(d);
	return found;
}

/* holders collects the pids that have target t's file open (mem is unused). */
static int holders(struct target t, struct procs *out)
{
	char target[PATH_MAX + 48], name[32];
	struct dirent *e;
	DIR *d;
	int rc = 0;

	snprintf(target, sizeof target, "%s/nvidia%s", cfg.root, target_name(name, sizeof name, t));
	if ((d = opendir("/proc")) == NULL)
		return -1;
	while (rc == 0 && (e = readdir(d)) != NULL) {
		unsigned long long pid;

		if (parse_uint(e->d_name, e->d_name + strlen(e->d_name), &pid) == 0 &&
		    pid <= UINT_MAX && holds((unsigned int)pid, target))
			rc = procs_add(out, (unsigned int)pid, 0);
	}
	closedir(d);
	return rc;
}

/* releasing reports whether a registered holder that has gone is still
 * within its release delay, stamping ctx/<pid>.<dev>.gone on first sight. */
static int releasing(const char *gone)
{
	unsigned long long stamp;
	char buf[32];
	int fd, n;

	if (cfg.release_ms < 0)
		return 1;
	if (cfg.release_ms == 0)
		return 0;
	fd = open(gone, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd >= 0) {
		n = snprintf(buf, sizeof buf, "%lld\n", now_ms());
		if (write(fd, buf, n) != n) {
			/* A short stamp reads as "just stamped" below, which is what it is. */
		}
		close(fd);
		return 1;
	}
	/* Unreadable: another observer created it and has not written it yet. */
	if (read_number(gone, &stamp) != 0)
		return 1;
	return now_ms() < (long long)stamp + cfg.release_ms;
}

/* collect lists the processes holding target t, sorted by pid, with their
 * real pids and memory in bytes.
 *
 * The ctx/ directory is read before /proc: holder.py opens the device before
 * it registers, so a registration seen here belongs to a process that already
 * holds the device, and the /proc scan cannot miss it and release it early. */
static int collect(struct target t, struct procs *out)
{
	struct procs reg = {0}, live = {0};
	char ctx[PATH_MAX + 64], gone[PATH_MAX + 72], name[32];
	unsigned long long mem;
	int rc;

	target_name(name, sizeof name, t);
	rc = registered(t, &reg);
	if (rc == 0)
		rc = holders(t, &live);
	for (size_t i = 0; rc == 0 && i < live.n; i++) {
		unsigned int pid = live.v[i].pid;

		snprintf(ctx, sizeof ctx, "%s/ctx/%u.%s", cfg.root, pid, name);
		if (!procs_has(&reg, pid) || read_number(ctx, &mem) != 0) {
			mem = cfg.default_mem;
		} else {
			/* Holding again after closing: its next release starts afresh. */
			snprintf(gone, sizeof gone, "%s.gone", ctx);
			unlink(gone);
		}
		rc = procs_add(out, pid, mem);
	}
	for (size_t i = 0; rc == 0 && i < reg.n; i++) {
		unsigned int pid = reg.v[i].pid;

		if (procs_has(&live, pid))
			continue;
		snprintf(ctx, sizeof ctx, "%s/ctx/%u.%s", cfg.root, pid, name);
		snprintf(gone, sizeof gone, "%s.gone", ctx);
		if (releasing(gone) && read_number(ctx, &mem) == 0) {
			rc = procs_add(out, pid, mem);
			continue;
		}
		/* Released (or released meanwhile by another observer, whose
		 * ctx file is gone): forget it. */
		unlink(ctx);
		unlink(gone);
	}
	free(reg.v);
	free(live.v);
	if (out->n > 1)
		qsort(out->v, out->n, sizeof *out->v, by_pid);
	return rc;
}

/* collect_device lists the processes on device dev as NVML does, sorted by
 * pid: those holding the whole device, then (in a MIG-mode device) those
 * holding each of its MIG devices, with gi set to the MIG device's index. */
static int collect_device(unsigned int dev, struct procs *out)
{
	int rc = collect((struct target){dev, 0}, out);

	for (unsigned int k = 0; rc == 0 && k < cfg.mig[dev]; k++) {
		struct procs m = {0};

		rc = collect((struct target){dev, k + 1}, &m);
		for (size_t i = 0; rc == 0 && i < m.n; i++) {
			rc = procs_add(out, m.v[i].pid, m.v[i].mem);
			if (rc == 0)
				out->v[out->n - 1].gi = k;
		}
		free(m.v);
	}
	if (rc == 0 && cfg.mig[dev] != 0 && out->n > 1)
		qsort(out->v, out->n, sizeof *out->v, by_pid);
	return rc;
}

enum kind { COMPUTE, GRAPHICS, MPS };

/* processes implements the three versions of the three process lists with
 * NVML's sizing contract: *count is the capacity of infos on entry and the
 * number of entries on return; when it is too small the call returns
 * NVML_ERROR_INSUFFICIENT_SIZE with the required count (infos may be NULL
 * when the capacity is 0). v1 is nvmlProcessInfo_v1_t; v2 and v3 are both
 * nvmlProcessInfo_v2_t (nvmlProcessInfo_t is the same type in nvml.h). */
static nvmlReturn_t processes(const char *fn, enum kind kind, int v1,
			      nvmlDevice_t device, unsigned int *count, void *infos)
{
	struct procs p = {0};
	unsigned int cap, dev;
	nvmlReturn_t ret = NVML_SUCCESS;

	if (!initialized())
		return traced(fn, NVML_ERROR_UNINITIALIZED, "");
	if (device_index(device, &dev) != 0 || count == NULL || (*count > 0 && infos == NULL))
		return traced(fn, NVML_ERROR_INVALID_ARGUMENT, "");
	cap = *count;
	/* Graphics and MPS clients are not modelled: those lists are empty. */
	if (kind == COMPUTE && collect_device(dev, &p) != 0)
		ret = NVML_ERROR_UNKNOWN;
	else if (p.n > cap)
		ret = NVML_ERROR_INSUFFICIENT_SIZE;
	for (size_t i = 0; ret == NVML_SUCCESS && i < p.n; i++) {
		unsigned int pid = host_pid(p.v[i].pid) + cfg.pid_offset;
		unsigned long long mem = cfg.mem_unavailable ? (unsigned long long)NVML_VALUE_NOT_AVAILABLE : p.v[i].mem;

		if (v1) {
			nvmlProcessInfo_v1_t *e = (nvmlProcessInfo_v1_t *)infos + i;
			e->pid = pid;
			e->usedGpuMemory = mem;
		} else {
			nvmlProcessInfo_v2_t *e = (nvmlProcessInfo_v2_t *)infos + i;
			e->pid = pid;
			e->usedGpuMemory = mem;
			e->gpuInstanceId = p.v[i].gi; /* NO_INSTANCE: not MIG */
			e->computeInstanceId = p.v[i].gi == NO_INSTANCE ? NO_INSTANCE : 0;
		}
	}
	if (ret == NVML_SUCCESS || ret == NVML_ERROR_INSUFFICIENT_SIZE)
		*count = (unsigned int)p.n;
	free(p.v);
	return traced(fn, ret, " dev=%u cap=%u n=%zu", dev, cap, p.n);
}

#define PROCESS_LIST(name, kind, v1, type)                                     \
	nvmlReturn_t name(nvmlDevice_t device, unsigned int *count, type *infos) \
	{                                                                      \
		return processes(__func__, kind, v1, device, count, infos);    \
	}

PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses, COMPUTE, 1, nvmlProcessInfo_v1_t)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v2, COMPUTE, 0, nvmlProcessInfo_v2_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, GRAPHICS, 1, nvmlProcessInfo_v1_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, GRAPHICS, 0, nvmlProcessInfo_v2_t)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses, MPS, 1, nvmlProcessInfo_v1_t)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v2, MPS, 0, nvmlProcessInfo_v2_t)
#ifndef FAKE_NVML_NO_V3
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v3, COMPUTE, 0, nvmlProcessInfo_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, GRAPHICS, 0, nvmlProcessInfo_t)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v3, MPS, 0, nvmlProcessInfo_t)
#endif

/* nvmlDeviceGetMemoryInfo: used is the sum of the listed entries (figures
 * reported as unavailable count 0), capped at the total. A device's entries
 * include its MIG devices' holders; a MIG device has total / K of its
 * parent's and counts its own holders. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	struct procs p = {0};
	unsigned long long used = 0, total = cfg.total_mem;
	int rc;

	ANY_QUERY(device, memory);
	if (mig == 0) {
		rc = collect_device(idx, &p);
	} else {
		rc = collect((struct target){idx, mig}, &p);
		total /= cfg.mig[idx];
	}
	if (rc != 0) {
		free(p.v);
		return traced(__func__, NVML_ERROR_UNKNOWN, "%s", whom);
	}
	for (size_t i = 0; !cfg.mem_unavailable && i < p.n; i++)
		used += p.v[i].mem;
	free(p.v);
	if (used > total)
		used = total;
	memory->total = total;
	memory->used = used;
	memory->free = total - used;
	return traced(__func__, NVML_SUCCESS, "%s used=%llu", whom, used);
}

/* ---- MIG ---------------------------------------------------------------- */

#ifndef FAKE_NVML_NO_MIG
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
	DEVICE_QUERY(device, pendingMode);
	if (currentMode == NULL)
		return traced(__func__, NVML_ERROR_INVALID_ARGUMENT, " dev=%u", idx);
	*currentMode = *pendingMode = cfg.mig[idx] != 0 ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
	return traced(__func__, NVML_SUCCESS, " dev=%u mode=%u", idx, *currentMode);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
	DEVICE_QUERY(device, count);
	if (cfg.mig[idx] == 0)
		return traced(__func__, NVML_ERROR_NOT_SUPPORTED, " dev=%u", idx);
	*count = MAX_MIG;
	return traced(__func__, NVML_SUCCESS, " dev=%u n=%u", idx, MAX_MIG);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice)
{
	DEVICE_QUERY(device, migDevice);
	if (cfg.mig[idx] == 0)
		return traced(__func__, NVML_ERROR_NOT_SUPPORTED, " dev=%u mig=%u", idx, index);
	if (index >= MAX_MIG)
		return traced(__func__, NVML_ERROR_INVALID_ARGUMENT, " dev=%u mig=%u", idx, index);
	if (index >= cfg.mig[idx])
		return traced(__func__, NVML_ERROR_NOT_FOUND, " dev=%u mig=%u", idx, index);
	migDevice->handle = &mig_devices[idx * MAX_MIG + index];
	return traced(__func__, NVML_SUCCESS, " dev=%u mig=%u", idx, index);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
	ANY_QUERY(device, isMigDevice);
	*isMigDevice = mig != 0;
	return traced(__func__, NVML_SUCCESS, "%s", whom);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
	ANY_QUERY(migDevice, device);
	if (mig == 0)
		return traced(__func__, NVML_ERROR_INVALID_ARGUMENT, "%s", whom);
	device->handle = &devices[idx];
	return traced(__func__, NVML_SUCCESS, "%s", whom);
}
#endif
