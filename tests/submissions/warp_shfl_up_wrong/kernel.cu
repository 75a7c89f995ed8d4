// Like warp_shfl_up, but the dot product is taken from the row's first thread, as after a shfl_down
// reduction: after an inclusive scan with __shfl_up_sync the first thread holds only its own product
// (the total is in the last), so every element of C is the sum of one product per phase.
#define TILE_SIZE 16
#define FULL_MASK 0xffffffffu

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        As[ty][tx] = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();

        for (int c = 0; c < TILE_SIZE; ++c) {
            float scan = As[ty][tx] * Bs[tx][c];
            for (int d = 1; d < TILE_SIZE; d *= 2) {
                float before = __shfl_up_sync(FULL_MASK, scan, d, TILE_SIZE);
                if (tx >= d)
                    scan += before;
            }
            float dot = __shfl_sync(FULL_MASK, scan, 0, TILE_SIZE);
            if (tx == c)
                sum += dot;
        }
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
