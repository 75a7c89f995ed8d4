#define BLOCK 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[BLOCK][BLOCK];
    __shared__ float Bs[BLOCK][BLOCK];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * BLOCK + ty;
    int col = blockIdx.x * BLOCK + tx;

    float sum = 0.0f;
    for (int p = 0; p < (k + BLOCK - 1) / BLOCK; ++p) {
        int aCol = p * BLOCK + tx;
        int bRow = p * BLOCK + ty;
        As[ty][tx] = (row < m && aCol < k) ? A[row * k + aCol] : 0.0f;
        Bs[ty][tx] = (bRow < k && col < n) ? B[bRow * n + col] : 0.0f;
        __syncthreads();

        for (int i = 0; i < BLOCK; ++i)
            sum += As[ty][i] * Bs[i][tx];
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
