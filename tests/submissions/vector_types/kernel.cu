// Tiled SGEMM with vector types: the inner product reads four elements of the A tile at a time as a
// float4 (the tile rows are 16-byte aligned), B is loaded with __ldg, and the thread's coordinates are an
// int2 made with make_int2.
#define TILE_SIZE 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float4 As4[TILE_SIZE][TILE_SIZE / 4];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int2 at = make_int2(blockIdx.x * TILE_SIZE + tx, blockIdx.y * TILE_SIZE + ty);  // (col, row)

    float *aRow = reinterpret_cast<float *>(As4[ty]);
    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        aRow[tx] = (at.y < m && p * TILE_SIZE + tx < k) ? A[at.y * k + p * TILE_SIZE + tx] : 0.0f;
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && at.x < n) ? __ldg(&B[(p * TILE_SIZE + ty) * n + at.x]) : 0.0f;
        __syncthreads();

        for (int i = 0; i < TILE_SIZE / 4; ++i) {
            float4 a = As4[ty][i];
            sum += a.x * Bs[4 * i][tx] + a.y * Bs[4 * i + 1][tx] + a.z * Bs[4 * i + 2][tx] + a.w * Bs[4 * i + 3][tx];
        }
        __syncthreads();
    }

    if (at.y < m && at.x < n) {
        float2 out = make_float2(sum, 0.0f);
        C[at.y * n + at.x] = out.x;
    }
}
