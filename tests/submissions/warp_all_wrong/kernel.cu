// Like warp_all, but the zero test looks at the warp's two rows of the B tile instead of the A tile: a
// warp skips its inner product when those two rows of B are zero, though the product needs every row of
// B. Wrong where k is not a multiple of 16 (the last B tile's padding rows are zero: the warps that hold
// them drop the last phase) and wherever an integer-valued B has two zero rows.
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
        As[ty][tx] = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();

        if (!__all_sync(FULL_MASK, Bs[ty][tx] == 0.0f)) {
            for (int i = 0; i < TILE_SIZE; ++i)
                sum += As[ty][i] * Bs[i][tx];
        }
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
