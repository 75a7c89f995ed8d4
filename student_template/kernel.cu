/*
 * Tiled shared-memory SGEMM lab.
 *
 * Compute C = A * B where, all stored ROW-MAJOR in global memory,
 *   A is m x k   (element (r, c) is A[r * k + c])
 *   B is k x n   (element (r, c) is B[r * n + c])
 *   C is m x n   (element (r, c) is C[r * n + c])
 *
 * Launch shape (see basicSgemm below; the grader launches it the same way):
 *   block = (TILE_SIZE, TILE_SIZE) threads
 *   grid  = (ceil(n / TILE_SIZE), ceil(m / TILE_SIZE)) blocks
 *   x (blockIdx.x, threadIdx.x) runs along the COLUMNS of C (n),
 *   y (blockIdx.y, threadIdx.y) runs along the ROWS of C (m).
 * Each thread computes exactly one element C[row][col]:
 *   row = blockIdx.y * TILE_SIZE + threadIdx.y
 *   col = blockIdx.x * TILE_SIZE + threadIdx.x
 *
 * The k dimension is walked in "phases" of TILE_SIZE. In each phase the block
 * cooperatively loads one TILE_SIZE x TILE_SIZE tile of A and one of B into
 * shared memory (each thread loads one element of each), then every thread
 * accumulates its partial dot product from the shared tiles.
 *
 * Two barriers (__syncthreads()) are needed in every phase:
 *   1. after loading the tiles: no thread may read a tile entry before the
 *      thread responsible for it has written it;
 *   2. after using the tiles: no thread may start loading the next phase's
 *      tiles while others are still reading the current ones.
 * Every thread of the block must reach both barriers, so never put them inside
 * an if that only some threads take.
 *
 * Boundary checks: m, n and k can be ANY values >= 1, not just multiples of
 * TILE_SIZE. Load a tile entry only if it lies inside A (or B); otherwise store
 * 0.0f in the tile. Write C[row][col] only if row < m and col < n.
 *
 * You may change TILE_SIZE to 8, 16 or 32.
 *
 * As shipped this file compiles (with "set but never used" warnings) but
 * writes nothing to C, so every test fails until the TODOs are done.
 */
#include <stdio.h>

#define TILE_SIZE 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    float sum = 0.0f;

    // TODO 1: number of phases needed to cover all of k (round UP).
    int numPhases = 0;

    for (int p = 0; p < numPhases; ++p) {
        // TODO 2: load As[ty][tx] = A[row][p * TILE_SIZE + tx], or 0.0f if that is outside A.
        // TODO 3: load Bs[ty][tx] = B[p * TILE_SIZE + ty][col], or 0.0f if that is outside B.
        // TODO 4: barrier: wait until both tiles are completely loaded.
        // TODO 5: sum += As[ty][i] * Bs[i][tx] for i = 0 .. TILE_SIZE-1.
        // TODO 6: barrier: wait until everyone is done with the tiles.
    }

    // TODO 7: if (row, col) lies inside C, store sum into C[row][col].
}

/* Host wrapper showing the launch configuration. A, B, C are device pointers. */
void basicSgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    if (m < 1 || n < 1 || k < 1) {
        printf("basicSgemm: invalid sizes m=%d n=%d k=%d\n", m, n, k);
        return;
    }
    dim3 block(TILE_SIZE, TILE_SIZE, 1);
    dim3 grid((n + TILE_SIZE - 1) / TILE_SIZE, (m + TILE_SIZE - 1) / TILE_SIZE, 1);
    mysgemm<<<grid, block>>>(m, n, k, A, B, C);
}
