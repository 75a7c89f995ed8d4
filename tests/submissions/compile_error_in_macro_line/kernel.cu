#include "cuda_runtime.h"
#include "device_launch_parameters.h"
#include <stdio.h>

#define TILE_WIDTH 16

// C = A * B, A is m x k, B is k x n, all row-major
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float subTileA[TILE_W][TILE_WIDTH];
    __shared__ float subTileB[TILE_WIDTH][TILE_WIDTH];

    int bx = blockIdx.x, by = blockIdx.y;
    int tx = threadIdx.x, ty = threadIdx.y;
    int Row = by * TILE_WIDTH + ty;
    int Col = bx * TILE_WIDTH + tx;
    float Pvalue = 0;

    for (int ph = 0; ph < (k - 1) / TILE_WIDTH + 1; ++ph) {
        if (Row < m && ph * TILE_WIDTH + tx < k)
            subTileA[ty][tx] = A[Row * k + ph * TILE_WIDTH + tx];
        else
            subTileA[ty][tx] = 0;
        if (Col < n && ph * TILE_WIDTH + ty < k)
            subTileB[ty][tx] = B[(ph * TILE_WIDTH + ty) * n + Col];
        else
            subTileB[ty][tx] = 0;
        __syncthreads();
        for (int i = 0; i < TILE_WIDTH; ++i)
            Pvalue += subTileA[ty][i] * subTileB[i][tx];
        __syncthreads();
    }
    if (Row < m && Col < n)
        C[Row * n + Col] = Pvalue;
}
