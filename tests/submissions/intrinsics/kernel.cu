// Tiled SGEMM written with the math intrinsics and qualifiers students reach for: __launch_bounds__,
// __restrict__, __forceinline__ and __noinline__ helpers, #pragma unroll with and without a count,
// fmaf/__fmaf_rn/__fmul_rn, fminf/fmaxf, min/max, __fdividef, __expf, __saturatef, rsqrtf, the
// float/int conversions and bit casts.
#define TILE_SIZE 16

__device__ __forceinline__ float madd(float a, float b, float acc) { return __fmaf_rn(a, b, acc); }

__device__ __noinline__ float tileValue(const float *__restrict__ M, int r, int c, int rows, int cols)
{
    // min/max clamp the index of the load; the bounds decide whether it is used
    int rr = max(0, min(r, rows - 1));
    int cc = max(0, min(c, cols - 1));
    float v = M[rr * cols + cc];
    return (r < rows && c < cols) ? v : 0.0f;
}

__global__ void __launch_bounds__(TILE_SIZE * TILE_SIZE, 2)
mysgemm(int m, int n, int k, const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty;
    int col = blockIdx.x * TILE_SIZE + tx;

    // All exactly 1 (or 0), whatever the rounding of the fast intrinsics: scale = 1, zero = 0.
    float scale = __saturatef(2.0f) * fminf(1.0f, fmaxf(__expf(0.0f), 0.5f)) * __fdividef(4.0f, 4.0f);
    float zero = __int_as_float(__float_as_int(0.0f)) * rsqrtf(4.0f);
    int phases = __float2int_rz(__int2float_rn((k + TILE_SIZE - 1) / TILE_SIZE));

    float sum = zero;
    #pragma unroll 1
    for (int p = 0; p < phases; ++p) {
        As[ty][tx] = tileValue(A, row, p * TILE_SIZE + tx, m, k);
        Bs[ty][tx] = tileValue(B, p * TILE_SIZE + ty, col, k, n);
        __syncthreads();

        #pragma unroll 4
        for (int i = 0; i < TILE_SIZE; i += 2) {
            sum = madd(As[ty][i], Bs[i][tx], sum);
            sum = fmaf(As[ty][i + 1], __fmul_rn(Bs[i + 1][tx], scale), sum);
        }
        __syncthreads();
    }

    if (row < m && col < n)
        C[row * n + col] = sum;
}
