// Tiled SGEMM whose loads and inner product are template and overloaded __device__ helpers: a
// template on the tile size, and `load` overloaded for the A and the B tile.
#define TILE_SIZE 16

template <int TILE>
__device__ float dotRow(const float (*As)[TILE], const float (*Bs)[TILE], int ty, int tx)
{
    float sum = 0.0f;
    for (int i = 0; i < TILE; ++i)
        sum += As[ty][i] * Bs[i][tx];
    return sum;
}

template <typename T>
__device__ T loadOrZero(const T *matrix, int r, int c, int rows, int cols)
{
    return (r < rows && c < cols) ? matrix[r * cols + c] : T(0);
}

__device__ float pick(float value) { return value; }
__device__ float pick(int value) { return (float)value; }

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    float sum = pick(0);
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        As[ty][tx] = loadOrZero<float>(A, row, p * TILE_SIZE + tx, m, k);
        Bs[ty][tx] = loadOrZero(B, p * TILE_SIZE + ty, col, k, n);
        __syncthreads();

        sum += pick(dotRow<TILE_SIZE>(As, Bs, ty, tx));
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
