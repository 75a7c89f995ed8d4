#include <stdio.h>

#define TILE_SIZE 16

// One element of a tile, 0 outside the matrix: any element type, any leading dimension.
template <typename T>
__device__ T load_or_zero(const T *M, int row, int col, int rows, int cols)
{
    return (row < rows && col < cols) ? M[row * cols + col] : T(0);
}

// A row of one tile times a column of the other: the tile size is a template argument.
template <int TILE>
__device__ float tile_dot(const float (*As)[TILE], const float (*Bs)[TILE], int ty, int tx)
{
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < TILE; ++i)
        sum += As[ty][i] * Bs[i][tx];
    return sum;
}

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        As[ty][tx] = load_or_zero<float>(A, row, p * TILE_SIZE + tx, m, k);
        Bs[ty][tx] = load_or_zero(B, p * TILE_SIZE + ty, col, k, n);
        __syncthreads();
        sum += tile_dot<TILE_SIZE>(As, Bs, ty, tx);
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}

void basicSgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    dim3 dimBlock(TILE_SIZE, TILE_SIZE);
    dim3 dimGrid((n + TILE_SIZE - 1) / TILE_SIZE, (m + TILE_SIZE - 1) / TILE_SIZE);
    mysgemm<<<dimGrid, dimBlock>>>(m, n, k, A, B, C);
    if (cudaGetLastError() != cudaSuccess)
        printf("basicSgemm: launch failed\n");
}
