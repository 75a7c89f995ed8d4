#define TILE_SIZE 16

// Correct, but threadIdx.x walks down a column: neighbouring threads touch addresses a whole row
// apart, so no global load or store is coalesced.
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + tx;
    int col = blockIdx.x * TILE_SIZE + ty;

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        As[tx][ty] = (row < m && p * TILE_SIZE + ty < k) ? A[row * k + p * TILE_SIZE + ty] : 0.0f;
        Bs[tx][ty] = (p * TILE_SIZE + tx < k && col < n) ? B[(p * TILE_SIZE + tx) * n + col] : 0.0f;
        __syncthreads();

        for (int i = 0; i < TILE_SIZE; ++i)
            sum += As[tx][i] * Bs[i][ty];
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
