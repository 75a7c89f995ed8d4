#define TILE_SIZE 16

// The kernel itself is a template over its tile size, instantiated for 16.
template <int TILE>
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE - 1) / TILE; ++p) {
        As[ty][tx] = (row < m && p * TILE + tx < k) ? A[row * k + p * TILE + tx] : 0.0f;
        Bs[ty][tx] = (p * TILE + ty < k && col < n) ? B[(p * TILE + ty) * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE; ++i)
            sum += As[ty][i] * Bs[i][tx];
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}

template __global__ void mysgemm<TILE_SIZE>(int, int, int, const float *, const float *, float *);
