#include <cuda_runtime.h>

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    const int tileDim = 8;  // the tile size lives here, not in a macro
    __shared__ float aTile[tileDim][tileDim];
    __shared__ float bTile[tileDim][tileDim];

    int row = blockIdx.y * tileDim + threadIdx.y;
    int col = blockIdx.x * tileDim + threadIdx.x;
    float result = 0.0f;

    for (int t = 0; t < (k + tileDim - 1) / tileDim; t++) {
        int aCol = t * tileDim + threadIdx.x;
        int bRow = t * tileDim + threadIdx.y;
        if (row < m && aCol < k) aTile[threadIdx.y][threadIdx.x] = A[row * k + aCol];
        else aTile[threadIdx.y][threadIdx.x] = 0.0f;
        if (bRow < k && col < n) bTile[threadIdx.y][threadIdx.x] = B[bRow * n + col];
        else bTile[threadIdx.y][threadIdx.x] = 0.0f;
        __syncthreads();
        for (int j = 0; j < tileDim; j++)
            result += aTile[threadIdx.y][j] * bTile[j][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) C[row * n + col] = result;
}
