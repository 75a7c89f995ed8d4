/* What reusing one process for several students' kernels would and would not give, for bench/context_reuse.py.

   context_reuse isolation CUBIN
     Three facts a long-lived GPU process would rest on, one line each:
     - pageable: whether a kernel can reach the process's ordinary (malloc'd) host memory (HMM);
     - contexts: whether a kernel in a second context of the process reads a buffer of the first;
     - freed: whether a kernel reads what a freed buffer of its own context held.
   context_reuse contexts CUBIN N
     Makes N contexts one after another in this process (each loads CUBIN, allocates, sets and frees a
     buffer, and is destroyed) and prints their mean and longest time: what a fresh context per student
     would cost in a process that is already running. CUBIN holds peek(src, dst) and poke(dst). */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <string.h>
#include <time.h>

#include "cuda_bench.h"

typedef int CUdevice;
enum { PAGEABLE_MEMORY_ACCESS = 88, ILLEGAL_ADDRESS = 700 };

static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*attribute)(int *, int, CUdevice);
    CUresult (*create)(CUcontext *, unsigned, CUdevice);
    CUresult (*destroy)(CUcontext);
    CUresult (*set_current)(CUcontext);
    CUresult (*load)(CUmodule *, const void *);
    CUresult (*get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*memset32)(CUdeviceptr, unsigned, size_t);
    CUresult (*copy_back)(void *, CUdeviceptr, size_t);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                       void **, void **);
    CUresult (*synchronize)(void);
} cu;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int bind(void) {
    void *library = dlopen("libcuda.so.1", RTLD_NOW);
    if (library == NULL) return 0;
    struct { void **slot; const char *name; } symbols[] = {
        {(void **)&cu.init, "cuInit"}, {(void **)&cu.device_get, "cuDeviceGet"},
        {(void **)&cu.attribute, "cuDeviceGetAttribute"}, {(void **)&cu.create, "cuCtxCreate_v2"},
        {(void **)&cu.destroy, "cuCtxDestroy_v2"}, {(void **)&cu.set_current, "cuCtxSetCurrent"},
        {(void **)&cu.load, "cuModuleLoadData"}, {(void **)&cu.get_function, "cuModuleGetFunction"},
        {(void **)&cu.alloc, "cuMemAlloc_v2"}, {(void **)&cu.free, "cuMemFree_v2"},
        {(void **)&cu.memset32, "cuMemsetD32_v2"}, {(void **)&cu.copy_back, "cuMemcpyDtoH_v2"},
        {(void **)&cu.launch, "cuLaunchKernel"}, {(void **)&cu.synchronize, "cuCtxSynchronize"},
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++)
        if ((*symbols[i].slot = dlsym(library, symbols[i].name)) == NULL) return 0;
    return 1;
}

/* One thread: *dst = *src. Returns the synchronize's status; *seen is what dst (device memory) holds then. */
static CUresult peek(CUmodule module, CUdeviceptr src, unsigned *seen) {
    CUfunction function;
    CUdeviceptr dst;
    if (cu.get_function(&function, module, "peek") || cu.alloc(&dst, 4) || cu.memset32(dst, 0, 1)) return -1;
    void *args[] = {&src, &dst};
    CUresult status = cu.launch(function, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
    if (status == 0) status = cu.synchronize();
    *seen = 0;
    if (status == 0) cu.copy_back(seen, dst, 4);
    return status;
}

static int isolation(CUdevice device, const void *image) {
    int pageable = -1;
    cu.attribute(&pageable, PAGEABLE_MEMORY_ACCESS, device);
    CUcontext first, second;
    CUmodule module;
    CUfunction poke;
    if (cu.create(&first, 0, device) || cu.load(&module, image) || cu.get_function(&poke, module, "poke")) return 3;
    unsigned *host = malloc(sizeof *host);
    *host = 7;
    void *args[] = {&host};
    CUresult status = cu.launch(poke, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
    if (status == 0) status = cu.synchronize();
    printf("pageable: attribute %d; a kernel's store to a malloc'd host word: status %d, the word now %u\n",
           pageable, status, *host);
    if (status == ILLEGAL_ADDRESS) {  /* the fault spoils this context: the rest in fresh ones */
        cu.destroy(first);
        if (cu.create(&first, 0, device)) return 3;
    }
    CUdeviceptr theirs;
    if (cu.alloc(&theirs, 4096) || cu.memset32(theirs, 0xABCD1234u, 1024) || cu.synchronize()) return 3;
    if (cu.create(&second, 0, device) || cu.load(&module, image)) return 3;
    unsigned seen;
    status = peek(module, theirs, &seen);
    printf("contexts: a kernel in a second context reads the first's buffer (holding abcd1234): status %d, read %x\n",
           status, seen);
    CUdeviceptr mine;
    if (cu.alloc(&mine, 4096) || cu.memset32(mine, 0x5EC2E7u, 1024) || cu.synchronize() || cu.free(mine)) return 3;
    status = peek(module, mine, &seen);
    printf("freed: a kernel reads a freed buffer of its context (holding 5ec2e7): status %d, read %x\n", status, seen);
    return 0;
}

static int contexts(CUdevice device, const void *image, int count) {
    double total = 0, longest = 0;
    for (int i = 0; i < count; i++) {
        double started = now();
        CUcontext context;
        CUmodule module;
        CUdeviceptr buffer;
        if (cu.create(&context, 0, device) || cu.load(&module, image) || cu.alloc(&buffer, 1 << 20) ||
            cu.memset32(buffer, 0, 1 << 18) || cu.synchronize() || cu.free(buffer) || cu.destroy(context))
            return 3;
        double took = now() - started;
        total += took;
        longest = took > longest ? took : longest;
    }
    printf("%d contexts: mean %.4f s, longest %.4f s\n", count, total / count, longest);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3 || !bind()) return 2;
    void *image = image_of(argv[2]);
    CUdevice device;
    if (image == NULL || cu.init(0) || cu.device_get(&device, 0)) return 3;
    if (!strcmp(argv[1], "isolation")) return isolation(device, image);
    if (!strcmp(argv[1], "contexts") && argc == 4) return contexts(device, image, atoi(argv[3]));
    return 2;
}
