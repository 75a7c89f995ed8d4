#include <stdio.h>
#define Tile_Width 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float ds_A[Tile_Width * Tile_Width];
    __shared__ float ds_B[Tile_Width * Tile_Width];

    int tx = threadIdx.x, ty = threadIdx.y;
    int Row = blockIdx.y * Tile_Width + ty;
    int Col = blockIdx.x * Tile_Width + tx;
    float Cvalue = 0.0;

    for (int t = 0; t < (k - 1) / Tile_Width + 1; t++) {
        if (Row < m && t * Tile_Width + tx < k)
            ds_A[ty * Tile_Width + tx] = A[Row * k + t * Tile_Width + tx];
        else
            ds_A[ty * Tile_Width + tx] = 0.0;
        if (t * Tile_Width + ty < k && Col < n)
            ds_B[ty * Tile_Width + tx] = B[(t * Tile_Width + ty) * n + Col];
        else
            ds_B[ty * Tile_Width + tx] = 0.0;
        __syncthreads();
        for (int i = 0; i < Tile_Width; i++)
            Cvalue += ds_A[ty * Tile_Width + i] * ds_B[i * Tile_Width + tx];
        __syncthreads();
    }
    if (Row < m && Col < n)
        C[Row * n + Col] = Cvalue;
}
