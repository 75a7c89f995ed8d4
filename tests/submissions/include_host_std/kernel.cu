#include <bits/stdc++.h>
#include <fstream>
#include <cuda_runtime.h>
using namespace std;

#define TILE_SIZE 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float tileA[TILE_SIZE][TILE_SIZE];
    __shared__ float tileB[TILE_SIZE][TILE_SIZE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty, col = blockIdx.x * TILE_SIZE + tx;
    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; p++) {
        int ak = p * TILE_SIZE + tx, bk = p * TILE_SIZE + ty;
        tileA[ty][tx] = (row < m && ak < k) ? A[row * k + ak] : 0.0f;
        tileB[ty][tx] = (bk < k && col < n) ? B[bk * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE_SIZE; i++) sum += tileA[ty][i] * tileB[i][tx];
        __syncthreads();
    }
    if (row < m && col < n) C[row * n + col] = sum;
}

// The student's own test driver: reads a matrix file, writes the product out.
void runFromFile(const string &path, int m, int n, int k)
{
    ifstream in(path);
    vector<float> a(m * k), b(k * n), c(m * n);
    for (auto &x : a) in >> x;
    for (auto &x : b) in >> x;
    float *dA, *dB, *dC;
    cudaMalloc(&dA, a.size() * sizeof(float));
    cudaMalloc(&dB, b.size() * sizeof(float));
    cudaMalloc(&dC, c.size() * sizeof(float));
    cudaMemcpy(dA, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dB, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice);
    dim3 block(TILE_SIZE, TILE_SIZE), grid((n + TILE_SIZE - 1) / TILE_SIZE, (m + TILE_SIZE - 1) / TILE_SIZE);
    mysgemm<<<grid, block>>>(m, n, k, dA, dB, dC);
    cudaMemcpy(c.data(), dC, c.size() * sizeof(float), cudaMemcpyDeviceToHost);
    ofstream out(path + ".out");
    for (float x : c) out << x << '\n';
    cudaFree(dA); cudaFree(dB); cudaFree(dC);
}
