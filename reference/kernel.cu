/*
 * Reference tiled SGEMM: C = A * B, all matrices row-major.
 *   A is m x k, B is k x n, C is m x n.
 * Launch: block (TILE_SIZE, TILE_SIZE), grid (ceil(n / TILE_SIZE), ceil(m / TILE_SIZE)).
 * x indexes columns of C (n), y indexes rows of C (m); one thread per element of C.
 * Works for any m, n, k >= 1: tile entries outside A or B are loaded as 0 and
 * threads outside C store nothing.
 */
#define TILE_SIZE 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int row = blockIdx.y * TILE_SIZE + ty;  /* row of C (and of A) */
    const int col = blockIdx.x * TILE_SIZE + tx;  /* column of C (and of B) */

    float sum = 0.0f;
    const int phases = (k + TILE_SIZE - 1) / TILE_SIZE;  /* ceil(k / TILE_SIZE) */

    for (int p = 0; p < phases; ++p) {
        const int aCol = p * TILE_SIZE + tx;  /* column of A this thread loads */
        const int bRow = p * TILE_SIZE + ty;  /* row of B this thread loads */

        As[ty][tx] = (row < m && aCol < k) ? A[row * k + aCol] : 0.0f;
        Bs[ty][tx] = (bRow < k && col < n) ? B[bRow * n + col] : 0.0f;
        __syncthreads();  /* both tiles fully loaded before anyone reads them */

        for (int i = 0; i < TILE_SIZE; ++i)
            sum += As[ty][i] * Bs[i][tx];
        __syncthreads();  /* everyone done with the tiles before they are overwritten */
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
