// Tiled SGEMM on dynamic shared memory: one `extern __shared__` array holds the A tile and, after it,
// the B tile (the lab launches every kernel with 2 * TILE_SIZE * TILE_SIZE floats of it).
#define TILE_SIZE 16

extern __shared__ float tiles[];

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;
    const int bTile = TILE_SIZE * TILE_SIZE;  // where the B tile starts

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        tiles[ty * TILE_SIZE + tx] = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        tiles[bTile + ty * TILE_SIZE + tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();

        for (int i = 0; i < TILE_SIZE; ++i)
            sum += tiles[ty * TILE_SIZE + i] * tiles[bTile + i * TILE_SIZE + tx];
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
