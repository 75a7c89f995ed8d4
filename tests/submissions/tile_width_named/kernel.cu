#include <stdio.h>

#define TILE_WIDTH 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Bs[TILE_WIDTH][TILE_WIDTH];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;

    float sum = 0.0f;
    int numPhases = (k + TILE_WIDTH - 1) / TILE_WIDTH;

    for (int p = 0; p < numPhases; ++p) {
        // load one element of each tile, 0 if outside the matrix
        if (row < m && p * TILE_WIDTH + tx < k)
            As[ty][tx] = A[row * k + p * TILE_WIDTH + tx];
        else
            As[ty][tx] = 0.0f;
        if (p * TILE_WIDTH + ty < k && col < n)
            Bs[ty][tx] = B[(p * TILE_WIDTH + ty) * n + col];
        else
            Bs[ty][tx] = 0.0f;
        __syncthreads();

        for (int i = 0; i < TILE_WIDTH; ++i)
            sum += As[ty][i] * Bs[i][tx];
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}

void basicSgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    if (m <= 0 || n <= 0 || k <= 0) {
        printf("basicSgemm: bad matrix sizes (m=%d, n=%d, k=%d)\n", m, n, k);
        return;
    }
    if (A == NULL || B == NULL || C == NULL) {
        printf("basicSgemm: null matrix pointer\n");
        return;
    }

    dim3 dimBlock(TILE_WIDTH, TILE_WIDTH);
    dim3 dimGrid((n + TILE_WIDTH - 1) / TILE_WIDTH, (m + TILE_WIDTH - 1) / TILE_WIDTH);
    mysgemm<<<dimGrid, dimBlock>>>(m, n, k, A, B, C);
}
