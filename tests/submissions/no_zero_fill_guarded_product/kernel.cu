#define TILE_WIDTH 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float subA[TILE_WIDTH][TILE_WIDTH];
    __shared__ float subB[TILE_WIDTH][TILE_WIDTH];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;

    float c = 0.0f;
    for (int q = 0; q < (k - 1) / TILE_WIDTH + 1; ++q) {
        if (row < m && q * TILE_WIDTH + tx < k)
            subA[ty][tx] = A[row * k + q * TILE_WIDTH + tx];
        if (col < n && q * TILE_WIDTH + ty < k)
            subB[ty][tx] = B[(q * TILE_WIDTH + ty) * n + col];
        __syncthreads();
        for (int i = 0; i < TILE_WIDTH; ++i)
            if (q * TILE_WIDTH + i < k)
                c += subA[ty][i] * subB[i][tx];
        __syncthreads();
    }
    if (row < m && col < n)
        C[row * n + col] = c;
}
