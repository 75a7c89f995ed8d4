/* bank_conflict/kernel.cu with its transposed B tile padded to [32][33]: a column of it touches 32 different
   banks, so the same accesses are conflict-free. */
#define TILE_SIZE 32

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bt[TILE_SIZE][TILE_SIZE + 1];  /* padded: a column spans all 32 banks */
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE_SIZE + ty, col = blockIdx.x * TILE_SIZE + tx;
    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        const int aCol = p * TILE_SIZE + tx, bRow = p * TILE_SIZE + ty;
        As[ty][tx] = (row < m && aCol < k) ? A[row * k + aCol] : 0.0f;
        Bt[tx][ty] = (bRow < k && col < n) ? B[bRow * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE_SIZE; ++i) sum += As[ty][i] * Bt[tx][i];
        __syncthreads();
    }
    if (row < m && col < n) C[row * n + col] = sum;
}
