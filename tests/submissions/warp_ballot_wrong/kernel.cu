// Like warp_ballot, but every row takes the ballot's high half as its own 16 bits: an even row (the low
// half of its warp) visits the products where the row below it has nonzeros. Wrong wherever the two
// rows' zeros differ: where m leaves the last tile an odd number of rows (the row below is padding, all
// zeros, so the last row of C is 0), and in rows with zeros of their own.
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

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        float a = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        As[ty][tx] = a;
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();

        unsigned nonzero = __ballot_sync(FULL_MASK, a != 0.0f);
        unsigned mine = nonzero >> 16;
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
