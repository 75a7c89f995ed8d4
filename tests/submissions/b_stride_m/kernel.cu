#define TILE_WIDTH 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float tileA[TILE_WIDTH][TILE_WIDTH];
    __shared__ float tileB[TILE_WIDTH][TILE_WIDTH];

    int bx = blockIdx.x, by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
    int Row = by * TILE_WIDTH + ty;
    int Col = bx * TILE_WIDTH + tx;
    float Pvalue = 0;

    for (int ph = 0; ph < (k + TILE_WIDTH - 1) / TILE_WIDTH; ++ph) {
        if (Row < m && ph * TILE_WIDTH + tx < k) tileA[ty][tx] = A[Row * k + ph * TILE_WIDTH + tx];
        else tileA[ty][tx] = 0;
        if (ph * TILE_WIDTH + ty < k && Col < n) tileB[ty][tx] = B[(ph * TILE_WIDTH + ty) * m + Col];
        else tileB[ty][tx] = 0;
        __syncthreads();
        for (int i = 0; i < TILE_WIDTH; ++i) Pvalue += tileA[ty][i] * tileB[i][tx];
        __syncthreads();
    }
    if (Row < m && Col < n) C[Row * n + Col] = Pvalue;
}
