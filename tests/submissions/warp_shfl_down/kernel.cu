// Tiled SGEMM whose inner products are tree reductions with __shfl_down_sync: for each column c of the
// tile, the 16 threads of a row (half a warp) each multiply one pair, the halving reduction leaves the
// dot product in the row's first thread, and __shfl_sync hands it to the thread that owns column c.
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

        for (int c = 0; c < TILE_SIZE; ++c) {
            float part = As[ty][tx] * Bs[tx][c];
            for (int offset = TILE_SIZE / 2; offset > 0; offset /= 2)
                part += __shfl_down_sync(FULL_MASK, part, offset, TILE_SIZE);
            float dot = __shfl_sync(FULL_MASK, part, 0, TILE_SIZE);
            if (tx == c)
                sum += dot;
        }
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
