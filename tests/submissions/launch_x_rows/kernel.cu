#include <cuda_runtime.h>

#define TILE_WIDTH 16

// C = A * B, row-major. This lab's host launches the grid's x over C's rows:
// threadIdx.x walks down a column of the tile, threadIdx.y along a row.
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float tileA[TILE_WIDTH][TILE_WIDTH];
    __shared__ float tileB[TILE_WIDTH][TILE_WIDTH];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.x * TILE_WIDTH + threadIdx.x;
    int col = blockIdx.y * TILE_WIDTH + threadIdx.y;
    float acc = 0.0f;

    for (int t = 0; t < (k + TILE_WIDTH - 1) / TILE_WIDTH; ++t) {
        tileA[tx][ty] = (row < m && t * TILE_WIDTH + ty < k) ? A[row * k + t * TILE_WIDTH + ty] : 0.0f;
        tileB[tx][ty] = (t * TILE_WIDTH + tx < k && col < n) ? B[(t * TILE_WIDTH + tx) * n + col] : 0.0f;
        __syncthreads();
        for (int e = 0; e < TILE_WIDTH; ++e)
            acc += tileA[tx][e] * tileB[e][ty];
        __syncthreads();
    }
    if (row < m && col < n)
        C[row * n + col] = acc;
}

void basicSgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid((m + TILE_WIDTH - 1) / TILE_WIDTH, (n + TILE_WIDTH - 1) / TILE_WIDTH);
    mysgemm<<<grid, block>>>(m, n, k, A, B, C);
}
