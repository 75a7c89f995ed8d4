/* Right answers, slowly: each thread copies its row of the A tile into a per-thread array indexed at run
   time (by a loop the compiler cannot unroll), so the array lives in local memory, not in registers. */
#define TILE_SIZE 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE_SIZE + ty, col = blockIdx.x * TILE_SIZE + tx;
    float mine[TILE_SIZE];
    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        const int aCol = p * TILE_SIZE + tx, bRow = p * TILE_SIZE + ty;
        As[ty][tx] = (row < m && aCol < k) ? A[row * k + aCol] : 0.0f;
        Bs[ty][tx] = (bRow < k && col < n) ? B[bRow * n + col] : 0.0f;
        __syncthreads();
        const int width = min(TILE_SIZE, k - p * TILE_SIZE);
        for (int i = 0; i < width; ++i) mine[(i + tx) % TILE_SIZE] = As[ty][i];
        for (int i = 0; i < width; ++i) sum += mine[(i + tx) % TILE_SIZE] * Bs[i][tx];
        __syncthreads();
    }
    if (row < m && col < n) C[row * n + col] = sum;
}
