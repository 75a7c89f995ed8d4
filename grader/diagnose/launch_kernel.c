/* The program compute-sanitizer watches: launches of students' kernels, one after another, each on a small,
   ragged shape.

   launch_kernel JOB [JOB ...] EVENT_FD CONTROL_FD
     JOB: CUBIN KERNEL ARGS GRID BLOCK M N K
     ARGS: the kernel's parameters in the configured order, comma separated, each one of m n k A B C;
     GRID, BLOCK: X,Y,Z each, as the kernel contract launches it (contract.py).

   A plain C program on the CUDA driver API (libcuda.so.1, opened at run time): no interpreter to start
   under the sanitizer, which makes one tool run several times cheaper than a Python one. For each job in
   turn it loads the module the GPU run built, allocates A, B and C at exactly their sizes (memcheck's
   padding then makes any overrun hit no other buffer), and speaks the grader's protocol on EVENT_FD, each
   event with the job's index:
     {"event": "buffers", "job": i, ...}   where A, B and C are, so the parent can name the buffer of an address;
     {"event": "await_device", "job": i}   then waits for "go" on CONTROL_FD before the launch: the GPU is
                                           never used by this while a timing measurement has it;
     {"event": "launched", "job": i, "status": "..."}   the launch happened, and how the synchronize ended.
   A job that did not end "ok" is the last: after a failed launch the context may be lost. Between jobs,
   the finished job's buffers are overwritten with zeros before they are freed and its module is unloaded,
   so the next kernel finds nothing of the last one (several jobs in one process are several students, see
   diagnose/groups.py).
   Exit status: 0 after the last launch (whatever the kernels did), 2 for a usage error, 3 if a launch never
   happened (no driver, no GPU, a module or kernel missing). The grader trusts a sanitizer's silence only
   after a "launched" event for each job and a zero exit status. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction;
typedef unsigned long long CUdeviceptr;

static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*load)(CUmodule *, const void *);
    CUresult (*get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*upload)(CUdeviceptr, const void *, size_t);
    CUresult (*memset32)(CUdeviceptr, unsigned, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*unload)(CUmodule);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                       void **, void **);
    CUresult (*synchronize)(void);
    CUresult (*error_name)(CUresult, const char **);
} cu;

static FILE *events;
static int job;  /* the index of the job being run, in every event */

static const char *error_name(CUresult status) {
    const char *name = NULL;
    if (cu.error_name == NULL || cu.error_name(status, &name) != 0 || name == NULL) return "CUDA_ERROR_UNKNOWN";
    return name;
}

static void not_launched(const char *what, CUresult status) {
    fprintf(events, "{\"event\": \"not_launched\", \"job\": %d, \"reason\": \"%s: %s\"}\n", job, what,
            error_name(status));
    fflush(events);
    exit(3);
}

static void check(CUresult status, const char *what) {
    if (status != 0) not_launched(what, status);
}

static int open_driver(void) {
    void *library = dlopen("libcuda.so.1", RTLD_NOW);
    if (library == NULL) return 0;
    struct { void **slot; const char *name; } symbols[] = {
        {(void **)&cu.init, "cuInit"}, {(void **)&cu.device_get, "cuDeviceGet"},
        {(void **)&cu.primary_retain, "cuDevicePrimaryCtxRetain"}, {(void **)&cu.set_current, "cuCtxSetCurrent"},
        {(void **)&cu.load, "cuModuleLoadData"}, {(void **)&cu.get_function, "cuModuleGetFunction"},
        {(void **)&cu.alloc, "cuMemAlloc_v2"}, {(void **)&cu.upload, "cuMemcpyHtoD_v2"},
        {(void **)&cu.memset32, "cuMemsetD32_v2"}, {(void **)&cu.free, "cuMemFree_v2"},
        {(void **)&cu.unload, "cuModuleUnload"}, {(void **)&cu.launch, "cuLaunchKernel"},
        {(void **)&cu.synchronize, "cuCtxSynchronize"}, {(void **)&cu.error_name, "cuGetErrorName"},
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        *symbols[i].slot = dlsym(library, symbols[i].name);
        if (*symbols[i].slot == NULL) return 0;
    }
    return 1;
}

static void *read_file(const char *path) {
    FILE *file = fopen(path, "rb");
    if (file == NULL) return NULL;
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    char *data = size > 0 ? malloc((size_t)size + 1) : NULL;
    if (data == NULL || fread(data, 1, (size_t)size, file) != (size_t)size) {
        fclose(file);
        free(data);
        return NULL;
    }
    data[size] = 0;
    fclose(file);
    return data;
}

/* Uniform in [-1, 1): the same inputs on every run, so a report is the same on every run. */
static void fill(float *values, size_t count, unsigned long long seed) {
    for (size_t i = 0; i < count; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        values[i] = (float)((seed >> 40) * (2.0 / 16777216.0) - 1.0);
    }
}

static CUdeviceptr device_copy(const float *host, size_t count) {
    CUdeviceptr pointer;
    check(cu.alloc(&pointer, count * sizeof(float)), "cuMemAlloc");
    check(cu.upload(pointer, host, count * sizeof(float)), "cuMemcpyHtoD");
    return pointer;
}

enum { JOB_ARGS = 8 };

/* One job: argv[0..7] are CUBIN KERNEL ARGS GRID BLOCK M N K. Returns the synchronize's status (0: ok). */
static CUresult run_job(char **argv, FILE *control) {
    unsigned grid[3], block[3];
    int m = atoi(argv[5]), n = atoi(argv[6]), k = atoi(argv[7]);
    if (sscanf(argv[3], "%u,%u,%u", &grid[0], &grid[1], &grid[2]) != 3 ||
        sscanf(argv[4], "%u,%u,%u", &block[0], &block[1], &block[2]) != 3 || m <= 0 || n <= 0 || k <= 0) exit(2);
    void *image = read_file(argv[0]);
    if (image == NULL) {
        fprintf(events, "{\"event\": \"not_launched\", \"job\": %d, \"reason\": \"the compiled module could not be read\"}\n",
                job);
        fflush(events);
        exit(3);
    }
    CUmodule module;
    CUfunction function;
    check(cu.load(&module, image), "cuModuleLoadData");
    free(image);
    check(cu.get_function(&function, module, argv[1]), "cuModuleGetFunction");
    size_t sizes[3] = {sizeof(float) * (size_t)m * k, sizeof(float) * (size_t)k * n, sizeof(float) * (size_t)m * n};
    float *a = malloc(sizes[0]), *b = malloc(sizes[1]);
    if (a == NULL || b == NULL) exit(3);
    fill(a, (size_t)m * k, 0x5EED5EEDULL);
    fill(b, (size_t)k * n, 0xB0B0B0B0ULL);
    CUdeviceptr buffers[3] = {device_copy(a, (size_t)m * k), device_copy(b, (size_t)k * n), 0};
    free(a);
    free(b);
    check(cu.alloc(&buffers[2], sizes[2]), "cuMemAlloc");
    check(cu.memset32(buffers[2], 0x7FC00000u, (size_t)m * n), "cuMemsetD32");
    fprintf(events, "{\"event\": \"buffers\", \"job\": %d, \"buffers\": {\"A\": [%llu, %zu], \"B\": [%llu, %zu], "
            "\"C\": [%llu, %zu]}}\n", job, buffers[0], sizes[0], buffers[1], sizes[1], buffers[2], sizes[2]);
    fflush(events);

    int dims[3] = {m, n, k};
    void *parameters[16];
    int count = 0;
    for (char *name = strtok(argv[2], ","); name != NULL && count < 16; name = strtok(NULL, ",")) {
        const char *known = "mnkABC", *at = strchr(known, name[0]);
        if (at == NULL || name[0] == 0 || name[1] != 0) exit(2);
        int index = (int)(at - known);
        parameters[count++] = index < 3 ? (void *)&dims[index] : (void *)&buffers[index - 3];
    }
    /* The turn covers the launch alone: loading the module (which the tool instruments) and the copies
       come first, so a timing measurement waits for the GPU to empty for as short a time as can be. */
    fprintf(events, "{\"event\": \"await_device\", \"job\": %d}\n", job);
    fflush(events);
    char answer[16] = {0};
    if (fgets(answer, sizeof answer, control) == NULL || strncmp(answer, "go", 2) != 0) exit(3);
    /* Dynamic shared memory as every backend gives it: two tiles of floats (contract.py dynamic_shared_bytes) */
    unsigned int dynamic_shared = 2u * block[0] * block[1] * block[2] * (unsigned int)sizeof(float);
    check(cu.launch(function, grid[0], grid[1], grid[2], block[0], block[1], block[2], dynamic_shared, NULL,
                    parameters, NULL),
          "cuLaunchKernel");
    CUresult status = cu.synchronize();
    fprintf(events, "{\"event\": \"launched\", \"job\": %d, \"status\": \"%s\"}\n", job,
            status == 0 ? "ok" : error_name(status));
    fflush(events);
    if (status == 0) {
        for (int i = 0; i < 3; i++) check(cu.memset32(buffers[i], 0, sizes[i] / sizeof(float)), "cuMemsetD32");
        check(cu.synchronize(), "cuCtxSynchronize");
        for (int i = 0; i < 3; i++) check(cu.free(buffers[i]), "cuMemFree");
        check(cu.unload(module), "cuModuleUnload");
    }
    return status;
}

int main(int argc, char **argv) {
    int jobs = (argc - 3) / JOB_ARGS;
    if (argc < 3 + JOB_ARGS || (argc - 3) % JOB_ARGS != 0) {
        fprintf(stderr, "usage: launch_kernel CUBIN KERNEL ARGS GRID BLOCK M N K [CUBIN ...] EVENT_FD CONTROL_FD\n");
        return 2;
    }
    events = fdopen(atoi(argv[argc - 2]), "w");
    FILE *control = fdopen(atoi(argv[argc - 1]), "r");
    if (events == NULL || control == NULL) return 2;
    if (!open_driver()) {
        fprintf(events, "{\"event\": \"not_launched\", \"job\": 0, \"reason\": \"the CUDA driver (libcuda.so.1) is not here\"}\n");
        fflush(events);
        return 3;
    }
    CUdevice device;
    CUcontext context;
    check(cu.init(0), "cuInit");
    check(cu.device_get(&device, 0), "cuDeviceGet");
    check(cu.primary_retain(&context, device), "cuDevicePrimaryCtxRetain");
    check(cu.set_current(context), "cuCtxSetCurrent");
    for (job = 0; job < jobs; job++) {
        if (run_job(argv + 1 + job * JOB_ARGS, control) != 0) break;
    }
    return 0;
}
