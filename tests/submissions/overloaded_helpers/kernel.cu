#define TILE_SIZE 16

// The same name for a bounds-checked 2-D load and a plain 1-D one.
__device__ float load(const float *M, int row, int col, int rows, int cols)
{
    if (row < rows && col < cols)
        return M[row * cols + col];
    return 0.0f;
}

__device__ float load(const float *tile, int index)
{
    return tile[index];
}

// And for a float and a double accumulator.
__device__ float accumulate(float sum, float a, float b) { return sum + a * b; }
__device__ double accumulate(double sum, double a, double b) { return sum + a * b; }

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE * TILE_SIZE];
    __shared__ float Bs[TILE_SIZE * TILE_SIZE];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        As[ty * TILE_SIZE + tx] = load(A, row, p * TILE_SIZE + tx, m, k);
        Bs[ty * TILE_SIZE + tx] = load(B, p * TILE_SIZE + ty, col, k, n);
        __syncthreads();
        for (int i = 0; i < TILE_SIZE; ++i)
            sum = accumulate(sum, load(As, ty * TILE_SIZE + i), load(Bs, i * TILE_SIZE + tx));
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
