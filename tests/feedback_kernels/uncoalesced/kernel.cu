/* Right answers, uncoalesced: threadIdx.x runs over C's rows instead of its columns, so the 32 threads of a
   warp read 32 different rows of A and B (one sector each) and write 32 different rows of C. */
#define TILE_SIZE 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE_SIZE + tx, col = blockIdx.x * TILE_SIZE + ty;
    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        const int aCol = p * TILE_SIZE + ty, bRow = p * TILE_SIZE + tx;
        As[tx][ty] = (row < m && aCol < k) ? A[row * k + aCol] : 0.0f;
        Bs[tx][ty] = (bRow < k && col < n) ? B[bRow * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE_SIZE; ++i) sum += As[tx][i] * Bs[i][ty];
        __syncthreads();
    }
    if (row < m && col < n) C[row * n + col] = sum;
}
