// Tiled SGEMM that stores C through a shared staging tile a warp exchanges: a warp holds two rows of the
// C tile, and each thread stores the element of the other row of its warp (as a kernel does that
// regroups a warp's results for wider stores). Only threads of one warp share those two rows, so
// __syncwarp() is the barrier between staging a result and reading the neighbour's.
#define TILE_SIZE 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];
    __shared__ float staged[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        As[ty][tx] = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();

        for (int i = 0; i < TILE_SIZE; ++i)
            sum += As[ty][i] * Bs[i][tx];
        __syncthreads();
    }

    staged[ty][tx] = sum;
    __syncwarp();
    int otherRow = blockIdx.y * TILE_SIZE + (ty ^ 1);  // the other row of this warp
    if (otherRow < m && col < n)
        C[otherRow * n + col] = staged[ty ^ 1][tx];
}
