#define TILE_SIZE 32

// Correct, but the tile of B is kept transposed in a 32-wide Bs: a warp stores (line 18) and reads
// (line 22) a column of Bs, whose 32 rows all start in bank 0: 32-way bank conflicts. The loads from
// global memory are coalesced. bank_conflict_padded is the same kernel with Bs[32][33].
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        As[ty][tx] = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        Bs[tx][ty] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();

        for (int i = 0; i < TILE_SIZE; ++i)
            sum += As[ty][i] * Bs[tx][i];
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
