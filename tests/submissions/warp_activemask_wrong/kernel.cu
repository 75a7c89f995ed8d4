// Like warp_shfl, but the inner product runs only in threads whose element of C exists, and shuffles
// among the threads __activemask() finds there: legal, but the threads whose column is past n hold A
// values the row needs (the element of A a thread loads is indexed by its column), and a shuffle from
// a thread that is not in the mask is undefined. Wrong where n is not a multiple of 16.
#define TILE_SIZE 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        float a = (row < m && p * TILE_SIZE + tx < k) ? A[row * k + p * TILE_SIZE + tx] : 0.0f;
        Bs[ty][tx] = (p * TILE_SIZE + ty < k && col < n) ? B[(p * TILE_SIZE + ty) * n + col] : 0.0f;
        __syncthreads();

        if (row < m && col < n) {
            unsigned active = __activemask();
            #pragma unroll
            for (int i = 0; i < TILE_SIZE; ++i)
                sum += __shfl_sync(active, a, i, TILE_SIZE) * Bs[i][tx];
        }
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
