// Cooperative groups on the CPU emulator (cuda_emu.h, included first): the thread block and its warp tiles.
//
// A block's sync() is __syncthreads(); a tile of N threads (N a power of two, at most 32) is N consecutive
// lanes of one warp, and its collectives are the warp's (__shfl_sync, __ballot_sync, __syncwarp ...) with
// the tile's mask and width. Every call takes the caller's line as a defaulted last argument, so a divergence
// is told at the student's line.
#pragma once

namespace cooperative_groups {

inline unsigned cuda_emu_thread_rank() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

class thread_block {
  public:
    void sync(int line = __builtin_LINE()) const { ::cuda_emu::syncthreads(line); }
    static unsigned long long thread_rank() { return cuda_emu_thread_rank(); }
    static unsigned long long size() { return (unsigned long long)blockDim.x * blockDim.y * blockDim.z; }
    static unsigned long long num_threads() { return size(); }
    static dim3 thread_index() { return threadIdx; }
    static dim3 group_index() { return blockIdx; }
    static dim3 group_dim() { return blockDim; }
    static dim3 dim_threads() { return blockDim; }
};

inline thread_block this_thread_block() { return thread_block(); }

// N consecutive lanes of a warp.
template <unsigned N>
class thread_block_tile {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tiled_partition: a power of two up to 32");

    static unsigned lane() { return cuda_emu_thread_rank() % 32; }
    static unsigned mask() { return (N == 32 ? 0xffffffffu : (1u << N) - 1u) << (lane() / N * N); }

  public:
    static unsigned long long thread_rank() { return cuda_emu_thread_rank() % N; }
    static constexpr unsigned long long size() { return N; }
    static constexpr unsigned long long num_threads() { return N; }
    static unsigned long long meta_group_rank() { return cuda_emu_thread_rank() / N; }
    static unsigned long long meta_group_size() { return (thread_block::size() + N - 1) / N; }

    void sync(int line = __builtin_LINE()) const {
        ::cuda_emu::collective(::cuda_emu::SYNCWARP, "tile.sync()", mask(), 0, 0, line);
    }
    template <class T>
    T shfl(T var, int source, int line = __builtin_LINE()) const {
        return shuffle(::cuda_emu::SHFL, "tile.shfl()", var, source, line);
    }
    template <class T>
    T shfl_up(T var, unsigned delta, int line = __builtin_LINE()) const {
        return shuffle(::cuda_emu::SHFL_UP, "tile.shfl_up()", var, (int)delta, line);
    }
    template <class T>
    T shfl_down(T var, unsigned delta, int line = __builtin_LINE()) const {
        return shuffle(::cuda_emu::SHFL_DOWN, "tile.shfl_down()", var, (int)delta, line);
    }
    template <class T>
    T shfl_xor(T var, unsigned lane_mask, int line = __builtin_LINE()) const {
        return shuffle(::cuda_emu::SHFL_XOR, "tile.shfl_xor()", var, (int)lane_mask, line);
    }
    // Votes: a ballot's bits are the tile's ranks.
    unsigned ballot(int predicate, int line = __builtin_LINE()) const {
        unsigned votes = ::cuda_emu::collective(::cuda_emu::BALLOT, "tile.ballot()", mask(), (int)(predicate != 0),
                                                0, line);
        return (votes & mask()) >> (lane() / N * N);
    }
    bool any(int predicate, int line = __builtin_LINE()) const {
        return ::cuda_emu::collective(::cuda_emu::ANY, "tile.any()", mask(), (int)(predicate != 0), 0, line);
    }
    bool all(int predicate, int line = __builtin_LINE()) const {
        return ::cuda_emu::collective(::cuda_emu::ALL, "tile.all()", mask(), (int)(predicate != 0), 0, line);
    }
    template <class T>
    unsigned match_any(T value, int line = __builtin_LINE()) const {
        unsigned same = ::cuda_emu::collective(::cuda_emu::MATCH_ANY, "tile.match_any()", mask(), value, 0, line);
        return (same & mask()) >> (lane() / N * N);
    }

  private:
    template <class T>
    static T shuffle(::cuda_emu::Kind kind, const char *name, T var, int operand, int line) {
        int source = ::cuda_emu::shuffle_source(kind, ::cuda_emu::lane_of(*::cuda_emu::current), operand, N);
        return ::cuda_emu::collective(kind, name, mask(), var, source, line);
    }
};

template <unsigned N, class Parent>
inline thread_block_tile<N> tiled_partition(const Parent &) {
    return thread_block_tile<N>();
}

inline void sync(const thread_block &block, int line = __builtin_LINE()) { block.sync(line); }
template <unsigned N>
inline void sync(const thread_block_tile<N> &tile, int line = __builtin_LINE()) {
    tile.sync(line);
}

}  // namespace cooperative_groups
