// The tile's inner product, kept in a header of its own the way some courses split a kernel.
#ifndef TILING_CUH
#define TILING_CUH

#define TILE_SIZE 16

__device__ float tile_dot(const float (*As)[TILE_SIZE], const float (*Bs)[TILE_SIZE], int ty, int tx)
{
    float sum = 0.0f;
    for (int i = 0; i < TILE_SIZE; ++i)
        sum += As[ty][i] * Bs[i][tx];
    return sum;
}

#endif
