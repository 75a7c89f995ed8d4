// Tiled SGEMM split along k within a row: thread (tx, ty) accumulates, for every column c of its row's
// C tile, the products of the k indices it loads (k = tx modulo 16) in part[c]. After the last phase each
// row's 16 threads (half a warp) reduce each part[c] with __shfl_down_sync (width 16), and __shfl_sync
// hands the dot product from the row's first thread to the thread that owns column c.
#define TILE_SIZE 16
#define FULL_MASK 0xffffffffu

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE + 1];  // padded: a row reads a column, Bs[tx][c], from 16 banks

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
        for (int offset = TILE_SIZE / 2; offset > 0; offset /= 2)
            dot += __shfl_down_sync(FULL_MASK, dot, offset, TILE_SIZE);
        dot = __shfl_sync(FULL_MASK, dot, 0, TILE_SIZE);
        if (tx == c)
            sum = dot;
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
