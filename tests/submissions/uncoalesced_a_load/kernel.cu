#define TILE_SIZE 32

// Correct, but the tile of A is loaded transposed: threadIdx.x walks down a column of A (line 18), so
// each warp's load of A touches 32 sectors. As is padded to [32][33], so storing it transposed is free.
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE + 1];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;
    int aRow = blockIdx.y * TILE_SIZE + tx;  // the row of A this thread loads

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        int aCol = p * TILE_SIZE + ty;
        As[tx][ty] = (aRow < m && aCol < k) ? A[aRow * k + aCol] : 0.0f;
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();

        for (int i = 0; i < TILE_SIZE; ++i)
            sum += As[ty][i] * Bs[i][tx];
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
