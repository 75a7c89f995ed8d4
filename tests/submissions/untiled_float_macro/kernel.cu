#include <cuda_runtime.h>
#define TILE_WIDTH 16.0

// One thread per element of C, straight from global memory (no tiles yet).
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m && col < n) {
        float sum = 0.0f;
        for (int i = 0; i < k; ++i)
            sum += A[row * k + i] * B[i * n + col];
        C[row * n + col] = sum;
    }
}
