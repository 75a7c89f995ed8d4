#include <cooperative_groups.h>
#include <cuda_runtime.h>

#define TILE_DIM 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float sA[TILE_DIM][TILE_DIM];
    __shared__ float sB[TILE_DIM][TILE_DIM];
    int r = blockIdx.y * TILE_DIM + threadIdx.y;
    int c = blockIdx.x * TILE_DIM + threadIdx.x;
    float v = 0.0f;
    int phases = (k + TILE_DIM - 1) / TILE_DIM;
    for (int p = 0; p < phases; ++p) {
        int a = p * TILE_DIM + threadIdx.x;
        int b = p * TILE_DIM + threadIdx.y;
        sA[threadIdx.y][threadIdx.x] = (r < m && a < k) ? A[r * k + a] : 0.0f;
        sB[threadIdx.y][threadIdx.x] = (b < k && c < n) ? B[b * n + c] : 0.0f;
        __syncthreads();
        for (int q = 0; q < TILE_DIM; ++q)
            v += sA[threadIdx.y][q] * sB[q][threadIdx.x];
        __syncthreads();
    }
    if (r < m && c < n)
        C[r * n + c] = v;
}
