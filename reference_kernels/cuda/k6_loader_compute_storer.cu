// k6_loader_compute_storer.cu -- rung 6: three roles, persistent: loader, compute, storer warps.
//
// What it demonstrates: overlapping the epilogue too. A persistent block (one per SM) walks over
// 256 x 128 output tiles. A loader warp streams K tiles through a partitioned cuda::pipeline without
// pausing at output-tile boundaries; eight compute warps (4 (M) x 2 (N), 64 x 64 each, the same warp
// tile as k3..k5) multiply and then hand their accumulators to a shared-memory staging buffer; a
// storer warp writes that buffer to global memory. The loader is never idle during an epilogue, and
// half of every epilogue's global stores overlap the compute warps' next main loop.
//
// Pipeline scheme:
//   operand ring: STAGES buffers of A (256, BK+skew) + B (BK, 128+skew); loader = producer, the 8
//     compute warps = consumers, the storer is not a member (the pipeline's per-stage barriers never
//     wait for it). The loader runs up to STAGES K tiles ahead, across output tiles.
//       loader  : for each tile, for k: producer_acquire ; issue K tile into the next stage ; producer_commit
//       compute : for each tile, for k: consumer_wait ; mma the stage ; consumer_release ; then the hand-off
//     Loader and compute warps walk the same tiles with the same K trip count, so the ring position
//     (a counter over all K tiles of the block) agrees on both sides.
//   C staging: ONE fp32 buffer of 256 rows x (64 + 4) floats. An output tile leaves in 2 passes of 64
//     columns: pass p carries the block tile's columns [64p, 64p + 64), which are exactly the
//     accumulators of the 4 compute warps whose N index is p.
//
// Hand-off protocol, per pass, two block-scoped cuda::barrier objects (mbarriers) of 288 expected
// arrivals (8 compute warps + the storer), used only through arrive_and_wait (a full barrier each time):
//   compute : c_empty.arrive_and_wait() (skipped before the block's very first pass) ; the 4 warps owning
//             pass p write their fragments to the buffer ; all 8 c_full.arrive_and_wait()
//   storer  : c_full.arrive_and_wait() ; write the 256 x 64 pass to C ; c_empty.arrive_and_wait()
//             (skipped after the block's very last pass)
//   A block with T tiles completes c_full 2T times and c_empty 2T - 1 times (0 and 0 for T = 0) on both
//   sides, so every phase is completed by all 9 warps and nothing is left waiting.
//   Why mbarriers and not named barriers (bar.sync id, 288): with a bar.arrive hand-off racecheck
//   reports 20 WAR hazards between the storer's reads and the compute warps' next writes, and with
//   bar.sync on both sides it still reports the same pair at times (compute-sanitizer 2025.3.1;
//   docs/validation/2026-11-22-h200-0453.md): racecheck does not order shared-memory accesses across a
//   named barrier that only part of the block takes part in. It does follow mbarrier arrive/wait, as
//   the k4 and k5 rings show (0 hazards). The storer loses nothing: at c_empty it waits for the compute
//   warps, as it would at the next c_full anyway.
//   The compute warps wait for pass 0 to be stored before writing pass 1; pass 1 is stored while they
//   run the next tile's main loop.
//
// Preconditions (checked by the launcher): sm_80+; A (M,K) fp16, B (K,N) fp16, C (M,N) fp32,
// row-major, unit column stride; M, N, K >= 1 (ragged edges: zero-filled gathers in the loader,
// guarded stores in the storer, as in the other rungs). Needs STAGES * 29184 + 69632 bytes of dynamic
// shared memory per block: 157184 at the default STAGES=3, which fits sm_80 (163 KB opt-in) and sm_90
// (227 KB) but not sm_86 / sm_89 (99 KB): there the launcher refuses with a CudaLaunchError (the kernel
// still compiles for them). STAGES=4 (186368 bytes) fits sm_90 only.
// Launch: grid min(#tiles, #SMs) (one block per SM; any grid size is correct), 320 threads (1 loader + 8
// compute + 1 storer warp), __launch_bounds__(320, 1): 10 warps over 4 sub-partitions cap a thread at
// 168 registers (not 204: three warps share one sub-partition's 16K registers). nvcc 13.0 fits that
// without spilling for sm_86, sm_89 and sm_90 (166 registers on sm_90); sm_80's ptxas reloads a few
// loop-invariant scalars (ldmatrix offsets, ring position) from local memory once per K tile (74 B
// stored, 88 B loaded).
// Numbers reached (docs/validation/2026-11-22-h200-0453/cuda_ladder_bench.md): 265 TFLOP/s at 4096^3
// on an H200 with 3 stages (35% of torch.matmul's 750), 262 with 4, 243 with 2: faster than the
// synchronous k1 (219). Named-barrier hand-offs reach 289, but racecheck flags them (above).
#include <cuda/pipeline>

#include "gemm_common.cuh"

#ifndef PIPECHECK_STAGES
#define PIPECHECK_STAGES 3
#endif

namespace {
constexpr int STAGES = PIPECHECK_STAGES;
static_assert(STAGES >= 2 && STAGES <= 4, "PIPECHECK_STAGES must be 2..4");
constexpr int BM = 256, BN = 128;
constexpr int LOADER_WARP = 0;
constexpr int COMPUTE_WARPS = 8;         // 4 (M) x 2 (N)
constexpr int WARPS_N = 2;
constexpr int STORER_WARP = 1 + COMPUTE_WARPS;                    // 9
constexpr int PIPE_THREADS = (1 + COMPUTE_WARPS) * pc::kWarp;     // 288: loader + compute (warps 0..8)
constexpr int HANDOFF_THREADS = (COMPUTE_WARPS + 1) * pc::kWarp;  // 288: compute + storer (warps 1..9)
constexpr int THREADS = (2 + COMPUTE_WARPS) * pc::kWarp;          // 320
constexpr int WM = 4, WN = 8;            // compute warp tile 64 x 64
constexpr int PASS_N = WN * 8;           // 64 output columns per hand-off pass: one N index of warps
constexpr int PASSES = BN / PASS_N;      // 2
static_assert(COMPUTE_WARPS == (BM / (WM * 16)) * WARPS_N && PASSES == WARPS_N, "warps must tile the block");
using AT = pc::ATile<BM>;
using BT = pc::BTile<BN>;
constexpr int STAGE_ELEMS = AT::ELEMS + BT::ELEMS;  // 10240 + 4352 halves = 29184 B
// Floats per staging row: 68 keeps every row 16-byte aligned for the storer's float4 reads (conflict
// free). The compute warps' 8-byte fragment writes see 2-way bank conflicts with it (rows g and g+1 of a
// half-warp are 4 banks apart); 72 would avoid them for 4 KB more smem, a cost paid once per pass only.
constexpr int C_LD = PASS_N + 4;
using Map = pc::ChunkMap<BM, BN, pc::kWarp, AT::LD, BT::LD>;  // the loader warp: 32 A + 16 B chunks per lane
// Named barrier ids (0 is __syncthreads, unused here).
constexpr int BAR_PIPE = 1;  // named barrier of the pipeline's members: loader + compute (288)
using Pipe = cuda::pipeline<cuda::thread_scope_block>;

__device__ __forceinline__ void bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// The loader and compute warps (threads 0 .. 287) as a group for cuda::make_pipeline; the storer is
// not a member, so the pipeline's per-stage barriers never wait for it.
struct PipeGroup {
  __device__ unsigned long long size() const { return PIPE_THREADS; }
  __device__ unsigned long long thread_rank() const { return threadIdx.x; }
  __device__ void sync() const { bar_sync(BAR_PIPE, PIPE_THREADS); }
};

// Output tile `tile` of the row-major tile grid: its first row and column. All three roles walk
// tiles blockIdx.x, blockIdx.x + gridDim.x, ... through this one function.
__device__ __forceinline__ void tile_origin(int tile, int tiles_n, int& row0, int& col0) {
  row0 = (tile / tiles_n) * BM;
  col0 = (tile % tiles_n) * BN;
}

__device__ __forceinline__ void copy_chunk(Pipe& pipe, __half* dst, const __half* base, int rows, int cols,
                                           int ld, int r, int c) {
  if (pc::chunk_in_bounds(base, rows, cols, ld, r, c)) {
    cuda::memcpy_async(dst, base + static_cast<long long>(r) * ld + c, cuda::aligned_size_t<16>(16), pipe);
  } else {
    *reinterpret_cast<uint4*>(dst) = pc::gather_chunk(base, rows, cols, ld, r, c);
  }
}
}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_k6_loader_compute_storer(const __half* __restrict__ A, const __half* __restrict__ B,
                              float* __restrict__ C, int M, int N, int K, int lda, int ldb, int ldc) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* ring = reinterpret_cast<__half*>(smem_raw);                              // (STAGES, STAGE_ELEMS)
  float* c_stage = reinterpret_cast<float*>(smem_raw + STAGES * STAGE_ELEMS * 2);  // (BM, C_LD), after the ring
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> pipe_state;
  // the C hand-off: compute warps + storer, arrive_and_wait only (see the header)
  __shared__ cuda::barrier<cuda::thread_scope_block> c_full, c_empty;

  const int tid = threadIdx.x;
  const int lane = tid % pc::kWarp;
  const int warp = tid / pc::kWarp;
  const int tiles_m = (M + BM - 1) / BM;
  const int tiles_n = (N + BN - 1) / BN;
  const int num_tiles = tiles_m * tiles_n;
  const int num_k_tiles = (K + pc::BK - 1) / pc::BK;

  if (threadIdx.x == 0) {
    init(&c_full, HANDOFF_THREADS);
    init(&c_empty, HANDOFF_THREADS);
  }
  __syncthreads();  // every warp sees the initialised hand-off barriers before the roles split

  if (warp == STORER_WARP) {
    const bool vec4 = (ldc & 3) == 0 && (reinterpret_cast<unsigned long long>(C) & 15ull) == 0;
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      int row0, col0;
      tile_origin(tile, tiles_n, row0, col0);
      const bool last_tile = tile + static_cast<int>(gridDim.x) >= num_tiles;
      for (int pass = 0; pass < PASSES; ++pass) {
        const int pcol0 = col0 + pass * PASS_N;  // first output column of this pass
        c_full.arrive_and_wait();  // the owners of this pass have written it  // pipecheck:storer_full_wait
        if (vec4 && row0 + BM <= M && pcol0 + PASS_N <= N) {
          // interior: 16-byte stores, two rows of 64 floats per warp instruction (2 x 256 B, coalesced)
          const int half = lane >> 4, c = (lane & 15) * 4;
#pragma unroll 8
          for (int r = half; r < BM; r += 2) {
            *reinterpret_cast<float4*>(C + static_cast<long long>(row0 + r) * ldc + pcol0 + c) =
                *reinterpret_cast<const float4*>(&c_stage[r * C_LD + c]);
          }
        } else if (pcol0 < N) {
          // edge: element by element, only what lies inside M x N
          const int c = pcol0 + lane * 2;
          for (int r = 0; r < BM && row0 + r < M; ++r) {
            const float2 v = *reinterpret_cast<const float2*>(&c_stage[r * C_LD + lane * 2]);
            float* dst = C + static_cast<long long>(row0 + r) * ldc;
            if (c < N) dst[c] = v.x;
            if (c + 1 < N) dst[c + 1] = v.y;
          }
        }
        // the buffer is free again; after the block's very last pass nobody would wait for it
        if (!(last_tile && pass == PASSES - 1)) c_empty.arrive_and_wait();
      }
    }
    return;
  }

  // 32 loader threads arrive on "produced", 256 compute threads on "consumed"
  Pipe pipe = cuda::make_pipeline(PipeGroup{}, &pipe_state, static_cast<size_t>(pc::kWarp));

  if (warp == LOADER_WARP) {
    const Map map(lane);
    int stage = 0;  // ring position: advances once per K tile over all of this block's output tiles
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      int row0, col0;
      tile_origin(tile, tiles_n, row0, col0);
      const bool interior = pc::interior_mn<BM, BN>(A, B, M, N, lda, ldb, row0, col0);
      const __half* a_src = A + static_cast<long long>(row0 + map.a_row) * lda + map.a_col;
      const __half* b_src = B + static_cast<long long>(map.b_row) * ldb + col0 + map.b_col;
      for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
        pipe.producer_acquire();
        __half* As = ring + stage * STAGE_ELEMS;  // (BM, BK + skew)
        __half* Bs = As + AT::ELEMS;              // (BK, BN + skew)
        const int k0 = k_tile * pc::BK;
        if (interior && k0 + pc::BK <= K) {  // warp-uniform fast path: whole, aligned chunks
#pragma unroll
          for (int i = 0; i < Map::A_PER; ++i) {
            cuda::memcpy_async(&As[map.a_smem(i)], a_src + k0 + static_cast<long long>(i * Map::A_ROW_STEP) * lda,
                               cuda::aligned_size_t<16>(16), pipe);
          }
#pragma unroll
          for (int i = 0; i < Map::B_PER; ++i) {
            cuda::memcpy_async(&Bs[map.b_smem(i)], b_src + static_cast<long long>(k0 + i * Map::B_ROW_STEP) * ldb,
                               cuda::aligned_size_t<16>(16), pipe);
          }
        } else {
          for (int i = 0; i < Map::A_PER; ++i) {
            copy_chunk(pipe, &As[map.a_smem(i)], A, M, K, lda, row0 + map.a_row + i * Map::A_ROW_STEP,
                       k0 + map.a_col);
          }
          for (int i = 0; i < Map::B_PER; ++i) {
            copy_chunk(pipe, &Bs[map.b_smem(i)], B, K, N, ldb, k0 + map.b_row + i * Map::B_ROW_STEP,
                       col0 + map.b_col);
          }
        }
        pipe.producer_commit();
        stage = stage + 1 == STAGES ? 0 : stage + 1;
      }
    }
  } else {
    // compute warps (1 .. 8)
    const int compute_warp = warp - 1;
    const int warp_mi = compute_warp / WARPS_N;  // 0..3
    const int warp_ni = compute_warp % WARPS_N;  // 0..1: the hand-off pass this warp's columns go out in
    const int warp_m0 = warp_mi * (WM * 16);
    const int warp_n0 = warp_ni * (WN * 8);
    const int g = lane >> 2, t2 = (lane & 3) * 2;
    int stage = 0;
    bool first_pass = true;
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      float acc[WM][WN][4];
      pc::zero_acc(acc);
      for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
        pipe.consumer_wait();
        const __half* As = ring + stage * STAGE_ELEMS;
        pc::mma_tile<WM, WN, AT::LD, BT::LD>(As, As + AT::ELEMS, acc, warp_m0, warp_n0, lane);
        pipe.consumer_release();
        stage = stage + 1 == STAGES ? 0 : stage + 1;
      }
      for (int pass = 0; pass < PASSES; ++pass) {
        if (!first_pass) c_empty.arrive_and_wait();  // the storer has written the previous pass
        first_pass = false;
        if (warp_ni == pass) {  // warp-uniform: this warp's 64 columns are the pass's 64 columns
#pragma unroll
          for (int i = 0; i < WM; ++i) {
#pragma unroll
            for (int j = 0; j < WN; ++j) {
#pragma unroll
              for (int half_row = 0; half_row < 2; ++half_row) {
                const int r = warp_m0 + i * 16 + g + half_row * 8;
                const int c = j * 8 + t2;
                *reinterpret_cast<float2*>(&c_stage[r * C_LD + c]) =
                    make_float2(acc[i][j][half_row * 2], acc[i][j][half_row * 2 + 1]);
              }
            }
          }
        }
        c_full.arrive_and_wait();  // hand the pass to the storer
      }
    }
  }
}
