/* One CUDA program's life in phases, for bench/cuda_start.py: which part of starting and ending a CUDA
   program is what side-by-side programs queue on.

   cuda_start_phases CUBIN KERNEL
   Prints one line: the monotonic time (ns) at which each phase ended, starting with main's entry. The
   program then returns from main, and the parent times the exit (the driver's teardown of the context). */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <time.h>

#include "cuda_bench.h"

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

#define NEED(call) do { if ((call) != 0) { fprintf(stderr, "%s failed\n", #call); return 3; } } while (0)

int main(int argc, char **argv) {
    long long t[8];
    t[0] = now_ns();
    if (argc != 3) return 2;
    void *image = image_of(argv[1]);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (cuda == NULL || image == NULL) return 3;
    CUresult (*init)(unsigned) = dlsym(cuda, "cuInit");
    CUresult (*device_get)(int *, int) = dlsym(cuda, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, int) = dlsym(cuda, "cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = dlsym(cuda, "cuCtxSetCurrent");
    CUresult (*load)(CUmodule *, const void *) = dlsym(cuda, "cuModuleLoadData");
    CUresult (*get_function)(CUfunction *, CUmodule, const char *) = dlsym(cuda, "cuModuleGetFunction");
    CUresult (*alloc)(CUdeviceptr *, size_t) = dlsym(cuda, "cuMemAlloc_v2");
    CUresult (*memset32)(CUdeviceptr, unsigned, size_t) = dlsym(cuda, "cuMemsetD32_v2");
    CUresult (*synchronize)(void) = dlsym(cuda, "cuCtxSynchronize");
    CUresult (*release)(int) = dlsym(cuda, "cuDevicePrimaryCtxRelease_v2");
    t[1] = now_ns();
    NEED(init(0));
    t[2] = now_ns();
    int device;
    CUcontext context;
    NEED(device_get(&device, 0));
    NEED(retain(&context, device));
    NEED(set_current(context));
    t[3] = now_ns();
    CUmodule module;
    CUfunction function;
    NEED(load(&module, image));
    NEED(get_function(&function, module, argv[2]));
    t[4] = now_ns();
    CUdeviceptr buffer;
    NEED(alloc(&buffer, 1 << 20));
    NEED(memset32(buffer, 0, 1 << 18));
    NEED(synchronize());
    t[5] = now_ns();
    NEED(release(device));
    t[6] = now_ns();
    printf("%lld %lld %lld %lld %lld %lld %lld\n", t[0], t[1], t[2], t[3], t[4], t[5], t[6]);
    fflush(stdout);
    return 0;
}
