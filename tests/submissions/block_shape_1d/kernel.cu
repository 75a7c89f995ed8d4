// Tiled SGEMM, one thread per element of C

#define TILE_WIDTH 16

// Written for blocks of TILE_WIDTH*TILE_WIDTH threads in x: dim3 block(TILE_WIDTH * TILE_WIDTH)
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float sA[TILE_WIDTH][TILE_WIDTH];
    __shared__ float sB[TILE_WIDTH][TILE_WIDTH];

    int tx = threadIdx.x % TILE_WIDTH;
    int ty = threadIdx.x / TILE_WIDTH;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;

    float acc = 0.0f;
    for (int t = 0; t < (k - 1) / TILE_WIDTH + 1; t++) {
        sA[ty][tx] = (row < m && t * TILE_WIDTH + tx < k) ? A[row * k + t * TILE_WIDTH + tx] : 0.0f;
        sB[ty][tx] = (t * TILE_WIDTH + ty < k && col < n) ? B[(t * TILE_WIDTH + ty) * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE_WIDTH; i++)
            acc += sA[ty][i] * sB[i][tx];
        __syncthreads();
    }
    if (row < m && col < n)
        C[row * n + col] = acc;
}
