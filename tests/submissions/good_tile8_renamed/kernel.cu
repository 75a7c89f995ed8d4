// Tiled matrix multiply, 8x8 tiles, flat shared arrays.
#define TILE_SIZE 8

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float tileA[TILE_SIZE * TILE_SIZE];
    __shared__ float tileB[TILE_SIZE * TILE_SIZE];

    const int rowIdx = blockIdx.y * blockDim.y + threadIdx.y;
    const int colIdx = blockIdx.x * blockDim.x + threadIdx.x;
    const int me = threadIdx.y * TILE_SIZE + threadIdx.x;   // my slot in the tiles

    float acc = 0.f;
    int ph = 0;
    while (ph * TILE_SIZE < k) {
        int aK = ph * TILE_SIZE + threadIdx.x;   // column of A I fetch
        int bK = ph * TILE_SIZE + threadIdx.y;   // row of B I fetch

        tileA[me] = (rowIdx < m && aK < k) ? A[rowIdx * k + aK] : 0.f;
        tileB[me] = (bK < k && colIdx < n) ? B[bK * n + colIdx] : 0.f;
        __syncthreads();

        for (int e = 0; e < TILE_SIZE; e++)
            acc += tileA[threadIdx.y * TILE_SIZE + e] * tileB[e * TILE_SIZE + threadIdx.x];
        __syncthreads();

        ph++;
    }

    if (rowIdx < m && colIdx < n)
        C[rowIdx * n + colIdx] = acc;
}
