#include <cuda_runtime_api.h>
#include <device_functions.h>
#include <cuda.h>

#define BLOCK_SIZE 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[BLOCK_SIZE][BLOCK_SIZE];
    __shared__ float Bs[BLOCK_SIZE][BLOCK_SIZE];
    int row = blockIdx.y * BLOCK_SIZE + threadIdx.y;
    int col = blockIdx.x * BLOCK_SIZE + threadIdx.x;
    float acc = 0.0f;

    for (int t = 0; t < k; t += BLOCK_SIZE) {
        As[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? A[row * k + t + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? B[(t + threadIdx.y) * n + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int e = 0; e < BLOCK_SIZE; e++)
            acc += As[threadIdx.y][e] * Bs[e][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) C[row * n + col] = acc;
}
