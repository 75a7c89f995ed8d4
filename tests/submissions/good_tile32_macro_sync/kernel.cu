#define TILE_SIZE 32

/* shorthand for __syncthreads() */
#define SYNC() __syncthreads()

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float sA[TILE_SIZE][TILE_SIZE];
    __shared__ float sB[TILE_SIZE][TILE_SIZE];

    int r = blockIdx.y * TILE_SIZE + threadIdx.y;
    int c = blockIdx.x * TILE_SIZE + threadIdx.x;
    float val = 0.0f;

    for (int t = 0; t < (k - 1) / TILE_SIZE + 1; t++) {
        int ka = t * TILE_SIZE + threadIdx.x;
        int kb = t * TILE_SIZE + threadIdx.y;
        sA[threadIdx.y][threadIdx.x] = (r < m && ka < k) ? A[r * k + ka] : 0.0f;
        sB[threadIdx.y][threadIdx.x] = (kb < k && c < n) ? B[kb * n + c] : 0.0f;

        // __syncthreads: tiles must be complete before the dot product
        SYNC();

        for (int j = 0; j < TILE_SIZE; j++)
            val += sA[threadIdx.y][j] * sB[j][threadIdx.x];

        // second __syncthreads so nobody overwrites a tile still in use
        SYNC();
    }

    if (r < m && c < n)
        C[r * n + c] = val;
}
