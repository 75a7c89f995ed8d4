// Tiled SGEMM with cooperative groups: the block's barriers are block.sync() and cg::sync(block); a row
// of the tile is a 16-thread tile of the block (tiled_partition<16>), whose threads hand their element of
// A around with row.shfl(); each warp (tiled_partition<32>) skips phases whose A rows are all zero.
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define TILE_SIZE 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    cg::thread_block_tile<TILE_SIZE> rowTile = cg::tiled_partition<TILE_SIZE>(block);

    int tx = rowTile.thread_rank();
    int ty = rowTile.meta_group_rank();
    int row = block.group_index().y * TILE_SIZE + ty;
    int col = block.group_index().x * TILE_SIZE + tx;

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        float a = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        As[ty][tx] = a;
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        block.sync();

        if (warp.any(a != 0.0f)) {
            for (int i = 0; i < TILE_SIZE; ++i)
                sum += rowTile.shfl(a, i) * Bs[i][tx];
        }
        cg::sync(block);
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
