#include <curand_kernel.h>

#define TILE_SIZE 16

// Where each phase's inner product starts in the tile, drawn with cuRAND's device API (the same for every
// thread: one seed, one sequence).
__device__ int firstIndex(int phase)
{
    curandState state;
    curand_init(1234ULL, 0ULL, (unsigned long long)phase, &state);
    return curand(&state) % TILE_SIZE;
}

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

        int first = firstIndex(p);
        for (int i = 0; i < TILE_SIZE; ++i) {
            int j = (first + i) % TILE_SIZE;
            sum += As[ty][j] * Bs[j][tx];
        }
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
