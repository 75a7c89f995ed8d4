/* Register-heavy tiled SGEMM: right answers, but every thread keeps 64 partial sums in registers
   (a per-thread array indexed only by constants), so each thread needs about 100 registers and few
   blocks of 256 threads fit on an SM. */
#define TILE_SIZE 16
#define PARTS 64

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE_SIZE + ty, col = blockIdx.x * TILE_SIZE + tx;
    float part[PARTS];
#pragma unroll
    for (int j = 0; j < PARTS; ++j) part[j] = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; p += 4) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int aCol = (p + q) * TILE_SIZE + tx, bRow = (p + q) * TILE_SIZE + ty;
            As[ty][tx] = (row < m && aCol < k) ? A[row * k + aCol] : 0.0f;
            Bs[ty][tx] = (bRow < k && col < n) ? B[bRow * n + col] : 0.0f;
            __syncthreads();
#pragma unroll
            for (int i = 0; i < TILE_SIZE; ++i) part[q * TILE_SIZE + i] += As[ty][i] * Bs[i][tx];
            __syncthreads();
        }
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < PARTS; ++j) sum += part[j];
    if (row < m && col < n) C[row * n + col] = sum;
}
