#include <cuda_fp16.h>

#define TILE_SIZE 16

// A's tile is kept as a half and the float remainder that half misses (a == hi + lo, exactly), the way
// mixed-precision GEMMs split an input; B's tile stays float.
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ __half AsHigh[TILE_SIZE][TILE_SIZE];
    __shared__ float AsLow[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        float a = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        __half high = __float2half(a);
        AsHigh[ty][tx] = high;
        AsLow[ty][tx] = a - __half2float(high);
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();

        for (int i = 0; i < TILE_SIZE; ++i)
            sum += (__half2float(AsHigh[ty][i]) + AsLow[ty][i]) * Bs[i][tx];
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
