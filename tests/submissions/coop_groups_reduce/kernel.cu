// Tiled SGEMM split along k within a row (as warp_shfl_down) with cooperative groups' warp tiles: each
// warp (tiled_partition<32>) skips the phases whose A rows are all zero, decided with all() and ballot();
// after the last phase a row's 16 threads (a tiled_partition<16>) reduce each column's partial sums with
// shfl_down and hand the dot product to the column's owner with shfl. C is stored through a staging tile
// the warp exchanges (each thread stores the element of the other row of its warp), after warp.sync().
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define TILE_SIZE 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE + 1];  // padded: a row reads a column, Bs[tx][c], from 16 banks
    __shared__ float staged[TILE_SIZE][TILE_SIZE];

    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    cg::thread_block_tile<16> row16 = cg::tiled_partition<16>(block);

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    float part[TILE_SIZE];
    for (int c = 0; c < TILE_SIZE; ++c)
        part[c] = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        As[ty][tx] = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        block.sync();

        bool zeroRows = warp.all(As[ty][tx] == 0.0f);
        unsigned nonzero = warp.ballot(As[ty][tx] != 0.0f);
        if (!zeroRows && nonzero != 0) {
            for (int c = 0; c < TILE_SIZE; ++c)
                part[c] += As[ty][tx] * Bs[tx][c];
        }
        cg::sync(block);
    }

    float sum = 0.0f;
    for (int c = 0; c < TILE_SIZE; ++c) {
        float dot = part[c];
        for (int offset = row16.size() / 2; offset > 0; offset /= 2)
            dot += row16.shfl_down(dot, offset);
        dot = row16.shfl(dot, 0);
        if (row16.thread_rank() == c)
            sum = dot;
    }

    staged[ty][tx] = sum;
    warp.sync();
    int otherRow = blockIdx.y * TILE_SIZE + (ty ^ 1);  // the other row of this warp
    if (otherRow < m && col < n)
        C[otherRow * n + col] = staged[ty ^ 1][tx];
}
