#define TILE_SIZE 32

// Correct, but the tile of B is loaded transposed: threadIdx.x walks down a column of B (line 19), so
// each warp's load of B touches 32 sectors. Bs is padded to [32][33], so storing it transposed is free.
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE + 1];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;
    int bCol = blockIdx.x * TILE_SIZE + ty;  // the column of B this thread loads

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        int bRow = p * TILE_SIZE + tx;
        As[ty][tx] = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        Bs[tx][ty] = (bRow < k && bCol < n) ? B[bRow * n + bCol] : 0.0f;
        __syncthreads();

        for (int i = 0; i < TILE_SIZE; ++i)
            sum += As[ty][i] * Bs[i][tx];
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
