// Tiled SGEMM that skips the zeros of A: after the tiles are loaded, __ballot_sync tells each warp which
// of its threads hold a nonzero element of the A tile. A warp holds two rows of the tile, so a row's 16
// bits are the ballot's low or high half; the inner loop visits only the set bits (the padding of
// partial tiles and the zeros of sparse rows are skipped).
#define TILE_SIZE 16
#define FULL_MASK 0xffffffffu

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;
    int half = (ty * TILE_SIZE + tx) / 16 % 2;  // which half of its warp this thread's row is

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        float a = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        As[ty][tx] = a;
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();

        unsigned nonzero = __ballot_sync(FULL_MASK, a != 0.0f);
        unsigned mine = (nonzero >> (16 * half)) & 0xffffu;
        while (mine != 0) {
            int i = __ffs(mine) - 1;
            sum += As[ty][i] * Bs[i][tx];
            mine &= mine - 1;
        }
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
