#define TILE_SIZE 32

// Correct, but C is stored transposed through a staging tile: threadIdx.x walks down a column of C
// (line 32), so each warp's store to C touches 32 sectors. Cs is padded to [32][33] (line 9), so reading
// it transposed is free.
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];
    __shared__ float Cs[TILE_SIZE][TILE_SIZE + 1];

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

    Cs[ty][tx] = sum;
    __syncthreads();
    int cRow = blockIdx.y * TILE_SIZE + tx;  // this thread stores the element of its transposed position
    int cCol = blockIdx.x * TILE_SIZE + ty;
    if (cRow < m && cCol < n)
        C[cRow * n + cCol] = Cs[tx][ty];
}
