/* What the bench's small CUDA programs share: the driver's types they use, and a module file read whole. */
#ifndef CUDA_BENCH_H
#define CUDA_BENCH_H
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef void *CUcontext, *CUmodule, *CUfunction;
typedef unsigned long long CUdeviceptr;

/* The file's bytes (a cubin for cuModuleLoadData), or NULL. */
static void *image_of(const char *path) {
    FILE *file = fopen(path, "rb");
    if (file == NULL) return NULL;
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    char *data = malloc((size_t)size + 1);
    if (data == NULL || fread(data, 1, (size_t)size, file) != (size_t)size) return NULL;
    fclose(file);
    return data;
}
#endif
