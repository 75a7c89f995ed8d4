#define TILE_SIZE 16

// good_basic without the bound on its store (line 22): threads past C's last row or column store too.
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
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE_SIZE; ++i)
            sum += As[ty][i] * Bs[i][tx];
        __syncthreads();
    }
    C[row * n + col] = sum;
}
