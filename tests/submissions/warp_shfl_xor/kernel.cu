// Tiled SGEMM split along k within a row, as warp_shfl_down, whose dot products are butterfly reductions
// with __shfl_xor_sync (lanes 8, 4, 2, 1): after the butterfly every thread of the row holds the total,
// and the one that owns column c keeps it.
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
        for (int lanes = TILE_SIZE / 2; lanes > 0; lanes /= 2)
            dot += __shfl_xor_sync(FULL_MASK, dot, lanes);
        if (tx == c)
            sum = dot;
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
