// The tile size taken from the launch: dynamic shared memory sized by the host.
#define TILE_SIZE blockDim.x

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    extern __shared__ float tiles[];
    float *As = tiles;
    float *Bs = tiles + TILE_SIZE * TILE_SIZE;

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        As[ty * TILE_SIZE + tx] = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        Bs[ty * TILE_SIZE + tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE_SIZE; ++i)
            sum += As[ty * TILE_SIZE + i] * Bs[i * TILE_SIZE + tx];
        __syncthreads();
    }
    if (row < m && col < n)
        C[row * n + col] = sum;
}
