// Like warp_shfl_down, but with the textbook whole-warp reduction (offsets 16, 8, ..., 1, no width):
// a warp holds two rows of the tile, so an even row's dot product adds the odd row's partial sums, an odd
// row's first thread doubles its own, and every row of C is wrong.
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

    float part[TILE_SIZE];
    for (int c = 0; c < TILE_SIZE; ++c)
        part[c] = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        As[ty][tx] = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();

        #pragma unroll
        for (int c = 0; c < TILE_SIZE; ++c)
            part[c] += As[ty][tx] * Bs[tx][c];
        __syncthreads();
    }

    float sum = 0.0f;
    #pragma unroll
    for (int c = 0; c < TILE_SIZE; ++c) {
        float dot = part[c];
        for (int offset = 16; offset > 0; offset /= 2)
            dot += __shfl_down_sync(FULL_MASK, dot, offset);
        dot = __shfl_sync(FULL_MASK, dot, 0, TILE_SIZE);
        if (tx == c)
            sum = dot;
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
