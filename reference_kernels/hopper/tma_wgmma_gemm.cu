// tma_wgmma_gemm.cu -- Hopper GEMM: a TMA producer warp feeds WGMMA consumer warpgroups through an
// mbarrier ring (warp specialization), compiled for sm_90a.
//
// What it computes: C (M, N) fp32 = A (M, K) * B (N, K)^T, A and B bf16 (fp16 with -DPIPECHECK_FP16),
// fp32 accumulation. B is given K-major, as (N, K) -- the layout of a torch.nn.Linear weight -- so
// `torch.matmul(a, b.t())` is the reference. Both operands are K-major in shared memory, which is the
// layout WGMMA reads without transposition.
//
// What it demonstrates:
//   * the tensor-memory accelerator (cp.async.bulk.tensor.2d, SASS UTMALDG) loading whole tiles with
//     one instruction per tile, its tensor maps (CUtensorMap, built on the host with
//     cuTensorMapEncodeTiled, 128-byte swizzle) passed by value as `const __grid_constant__` params;
//   * an N-stage ring of shared-memory stages, each guarded by two mbarriers (SASS SYNCS.*):
//       full[s]  -- arrival count 1: the producer's arrive.expect_tx(STAGE_BYTES); the phase completes
//                   when that arrival AND all STAGE_BYTES of both TMA copies have landed (complete_tx);
//       empty[s] -- arrival count 4 * CONSUMERS: lane 0 of every consumer warp arrives once the WGMMA
//                   that read stage s has completed, so the producer may overwrite it;
//   * warpgroup MMA (wgmma.mma_async m64nNk16, SASS HGMMA) reading both operands straight from the
//     swizzled stages through shared-memory matrix descriptors, accumulating in registers;
//   * warp specialization with register reallocation: warpgroup 0 is the producer (one thread issues
//     every TMA) and gives registers back (setmaxnreg.dec 40); warpgroups 1..CONSUMERS are consumers
//     and take them (setmaxnreg.inc 232), each owning 64 rows of the BM x BN block tile.
//
// Pipeline scheme (k-tile kt lives in stage s = kt % STAGES; `round` = kt / STAGES counts the uses of
// that stage, and the phase parity of both of its barriers for that use is round & 1):
//   producer : for kt: if round > 0, wait empty[s] phase (round - 1)   (the consumers released it)
//                      arrive.expect_tx(full[s], STAGE_BYTES); TMA A tile and B tile -> stage s
//   consumer : for kt: wait full[s] phase round; wgmma.fence; 4 x wgmma k16 (BK = 64); commit
//                      wgmma.wait_group 1   -> the group of k-tile kt-1 has completed (kt's may run on)
//                      release empty[(kt-1) % STAGES]                 (one group stays in flight)
//              then wgmma.wait_group 0 and the epilogue.
//   So up to STAGES tiles are in flight ahead of the tensor cores and one WGMMA group overlaps the
//   next tile's barrier wait. STAGES >= 2 is required: with one stage the consumer would release a
//   stage only after waiting for the load that needs it (deadlock).
//
// Ragged edges: the tensor maps carry the true extents (M, K) and (N, K); TMA fills every element of a
// box outside them with zeros and still counts the full box in complete_tx, so partial M, N and K
// tiles need no special case in the main loop (zeros add nothing to the dot products). The epilogue
// stores only elements with row < M and col < N (float2 when the row stride and C allow it).
//
// Preconditions (checked by the Python launcher, reference_kernels/hopper/launch.py):
//   sm_90a (H100/H200); A, B bf16 or fp16 with unit stride along K; the row strides of A and B are
//   multiples of 8 elements (TMA global strides are multiples of 16 bytes), so a contiguous input
//   needs K % 8 == 0; A, B base addresses 16-byte aligned; C fp32 with unit column stride;
//   M, N, K >= 1; dynamic shared memory STAGES * STAGE_BYTES + 1024 with the opt-in attribute set.
// Launch: grid (ceil(N / BN), ceil(M / BM)), block 128 * (CONSUMERS + 1) threads.
// Compile-time knobs: PIPECHECK_STAGES (2..6, default 4), PIPECHECK_CONSUMERS (1 or 2, default 2;
// BM = 64 * CONSUMERS), PIPECHECK_BN (128 or 256, default 128), PIPECHECK_FP16 (fp16 instead of bf16).
// Numbers reached on an H200 (docs/validation/2026-11-22-h200-0223/hopper_gemm_bench.md): 2 consumers,
// 128x256 tiles, 4 stages: 707 TFLOP/s at 4096^3 (93% of torch.matmul's 763) and 627 at 8192^3 (83% of
// 759); 128x128 tiles, 4 stages: 607 / 548; 1 consumer, 64x128, 4 stages: 422 / 293.
//
// Lines tagged `// pipecheck:<tag>` are the ones the mutants in reference_kernels/mutants/hopper
// replace, one bug each.  Written from the PTX ISA (wgmma, cp.async.bulk.tensor, mbarrier, setmaxnreg).

#ifndef PIPECHECK_STAGES
#define PIPECHECK_STAGES 4  // pipecheck:stages
#endif
#ifndef PIPECHECK_CONSUMERS
#define PIPECHECK_CONSUMERS 2
#endif
#ifndef PIPECHECK_BN
#define PIPECHECK_BN 128
#endif

#ifdef PIPECHECK_FP16
#define PC_AB_TYPE "f16"
#else
#define PC_AB_TYPE "bf16"
#endif

typedef unsigned int u32;
typedef unsigned long long u64;

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned. Declared here so the file needs no
// headers (NVRTC and nvcc compile it alike).
struct alignas(64) TmaDescriptor {
  u64 opaque[16];
};

namespace pc_hopper {

constexpr int STAGES = PIPECHECK_STAGES;
constexpr int CONSUMERS = PIPECHECK_CONSUMERS;
constexpr int BN = PIPECHECK_BN;
constexpr int BM = 64 * CONSUMERS;  // each consumer warpgroup owns 64 rows (one wgmma m64)
constexpr int BK = 64;              // 64 x 2 bytes = 128 bytes: one 128-byte swizzle row per tile row
constexpr int THREADS = 128 * (CONSUMERS + 1);
constexpr u32 A_STAGE_BYTES = BM * BK * 2;  // (BM, BK) 16-bit
constexpr u32 B_STAGE_BYTES = BN * BK * 2;  // (BN, BK) 16-bit
constexpr u32 STAGE_BYTES = A_STAGE_BYTES + B_STAGE_BYTES;
constexpr int ACC = BN / 2;                 // fp32 accumulators per consumer thread (64 x BN / 128)
#if PIPECHECK_CONSUMERS == 2
// Register reallocation (setmaxnreg): the 384-thread block starts with the launch-bounds cap of 168
// registers per thread; the producer warpgroup drops to 40 and the two consumer warpgroups rise to
// 232: 128 * 40 + 256 * 232 = 64512 <= 65536. With one consumer (256 threads) every thread may
// already hold 255 registers, so there is nothing to reallocate and the kernel does not.
constexpr int PRODUCER_REGS = 40;
constexpr int CONSUMER_REGS = 232;
#endif
struct alignas(8) Float2 {
  float x, y;
};

static_assert(STAGES >= 2 && STAGES <= 6,
              "PIPECHECK_STAGES must be 2..6: one WGMMA group stays in flight, so a single stage "
              "deadlocks, and 7 stages of 32 KB exceed the 227 KB a block may use");
static_assert(CONSUMERS == 1 || CONSUMERS == 2, "PIPECHECK_CONSUMERS must be 1 or 2");
static_assert(BN == 128 || BN == 256, "PIPECHECK_BN must be 128 or 256 (wgmma m64n128k16 / m64n256k16)");
static_assert(STAGES * STAGE_BYTES + 1024 <= 232448,
              "the stage ring does not fit in the 227 KB of shared memory a block may use on sm_90");
static_assert(A_STAGE_BYTES % 1024 == 0 && B_STAGE_BYTES % 1024 == 0,
              "every tile must start on a 1024-byte boundary: the 128-byte swizzle repeats every 8 rows");

// 32-bit shared-state-space address of a generic pointer into shared memory (what the PTX
// instructions below take); inline PTX keeps the file free of headers.
__device__ __forceinline__ u32 smem_u32(const void* p) {
  u32 addr;
  asm("{\n.reg .u64 t;\ncvta.to.shared.u64 t, %1;\ncvt.u32.u64 %0, t;\n}\n" : "=r"(addr) : "l"(p));
  return addr;
}

// ---------------------------------------------------------------------------------------- mbarrier

__device__ __forceinline__ void mbar_init(u64* bar, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(arrivals) : "memory");
}

// One arrival that also raises the phase's expected transaction count by `bytes`.
__device__ __forceinline__ void mbar_arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// Block until the phase of `bar` with parity `parity` has completed (acquire, CTA scope).
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
  u32 done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// ---------------------------------------------------------------------------------------- TMA

// Copy the box at element coordinates (c0 = inner/K, c1 = outer/rows) of `map` into `dst`; the bytes
// are counted on `bar` (complete_tx). Out-of-bounds elements of the box arrive as zeros.
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaDescriptor* map, u64* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<u64>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// ---------------------------------------------------------------------------------------- WGMMA

// Shared-memory matrix descriptor of a K-major tile written by TMA with 128-byte swizzle: rows of
// 128 bytes (64 elements of K), 8-row groups 1024 bytes apart (stride byte offset); the leading byte
// offset is unused for swizzled K-major tiles (1 by convention). The tile must be 1024-byte aligned
// (base offset 0). Advancing K by 16 elements inside the 128-byte row adds 32 bytes to the start
// address (2 in the >> 4 encoding): the hardware applies the swizzle to the final address.
__device__ __forceinline__ u64 smem_desc_k_major_sw128(const void* tile) {
  const u64 addr = smem_u32(tile);
  u64 desc = (addr & 0x3FFFF) >> 4;        // bits 0-13: start address >> 4
  desc |= static_cast<u64>(16 >> 4) << 16;  // bits 16-29: leading byte offset >> 4
  desc |= static_cast<u64>(1024 >> 4) << 32;  // bits 32-45: stride byte offset >> 4
  desc |= static_cast<u64>(1) << 62;        // bits 62-63: 1 = 128-byte swizzle
  return desc;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keep the compiler from moving accumulator reads or writes across a wgmma fence/wait.
template <int N>
__device__ __forceinline__ void pin_accumulators(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64 x 128, fp32, 64 registers per thread) += A (64 x 16, smem) * B (128 x 16, smem)^T.
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], u64 desc_a, u64 desc_b) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." PC_AB_TYPE "." PC_AB_TYPE "\n"
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19,"
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37,"
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55,"
      "%56, %57, %58, %59, %60, %61, %62, %63}"
      ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
        "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
        "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
        "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
        "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
        "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

// D (64 x 256, fp32, 128 registers per thread) += A (64 x 16, smem) * B (256 x 16, smem)^T.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], u64 desc_a, u64 desc_b) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." PC_AB_TYPE "." PC_AB_TYPE "\n"
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19,"
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37,"
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55,"
      "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73,"
      "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91,"
      "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107,"
      "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122,"
      "%123, %124, %125, %126, %127}"
      ", %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
        "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
        "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
        "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
        "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
        "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),
        "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
        "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),
        "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),
        "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),
        "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]),
        "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]),
        "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]),
        "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

template <int N>
__device__ __forceinline__ void wgmma_tile(float (&d)[N], u64 desc_a, u64 desc_b);
template <>
__device__ __forceinline__ void wgmma_tile<64>(float (&d)[64], u64 desc_a, u64 desc_b) {
  wgmma_m64n128k16(d, desc_a, desc_b);
}
template <>
__device__ __forceinline__ void wgmma_tile<128>(float (&d)[128], u64 desc_a, u64 desc_b) {
  wgmma_m64n256k16(d, desc_a, desc_b);
}

}  // namespace pc_hopper

// ---------------------------------------------------------------------------------------- kernel

extern "C" __global__ void __launch_bounds__(pc_hopper::THREADS, 1)
    hopper_tma_wgmma_gemm(const __grid_constant__ TmaDescriptor tma_a,  // A (M, K), box (BK, BM)
                          const __grid_constant__ TmaDescriptor tma_b,  // B (N, K), box (BK, BN)
                          float* __restrict__ c, int m, int n, int k, long long ldc) {
  using namespace pc_hopper;
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) u64 full[STAGES];   // TMA data of stage s has landed
  __shared__ __align__(8) u64 empty[STAGES];  // the consumers are done reading stage s

  // Stage s: A tile (BM, BK) then B tile (BN, BK), each 1024-byte aligned for the 128-byte swizzle.
  unsigned char* ring = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);  // (STAGES, STAGE_BYTES)

  const int warpgroup = threadIdx.x / 128;
  const int m0 = blockIdx.y * BM;
  const int n0 = blockIdx.x * BN;
  const int k_tiles = (k + BK - 1) / BK;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 4 * CONSUMERS);
    }
    // make the initialized barriers visible to the async proxy (the TMA unit completes on them)
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == 0) {
    // ------------------------------------------------------------------ producer warpgroup
#if PIPECHECK_CONSUMERS == 2
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PRODUCER_REGS));
#endif
    if (threadIdx.x == 0) {
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % STAGES;
        const u32 round = kt / STAGES;
        if (round > 0) mbar_wait(&empty[s], (round - 1) & 1);  // pipecheck:empty_wait
        unsigned char* stage = ring + s * STAGE_BYTES;
        mbar_arrive_expect_tx(&full[s], STAGE_BYTES);  // pipecheck:expect_tx
        tma_load_2d(stage, &tma_a, &full[s], kt * BK, m0);  // pipecheck:tma_a
        tma_load_2d(stage + A_STAGE_BYTES, &tma_b, &full[s], kt * BK, n0);  // pipecheck:tma_b
      }
    }
  } else {
    // ------------------------------------------------------------------ consumer warpgroups
#if PIPECHECK_CONSUMERS == 2
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONSUMER_REGS));
#endif
    const int consumer = warpgroup - 1;  // rows [consumer * 64, consumer * 64 + 64) of the block tile
    const int lane = threadIdx.x % 32;
    float d[ACC];
#pragma unroll
    for (int i = 0; i < ACC; ++i) d[i] = 0.0f;

    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % STAGES;
      const u32 phase = (kt / STAGES) & 1;
      mbar_wait(&full[s], phase);  // pipecheck:full_wait
      const unsigned char* stage = ring + s * STAGE_BYTES;
      const u64 desc_a = smem_desc_k_major_sw128(stage + consumer * 64 * BK * 2);
      const u64 desc_b = smem_desc_k_major_sw128(stage + A_STAGE_BYTES);
      pin_accumulators(d);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        wgmma_tile(d, desc_a + 2 * kk, desc_b + 2 * kk);  // +32 bytes per k16 step
      }
      wgmma_commit();
      wgmma_wait<1>();  // pipecheck:wgmma_wait
      pin_accumulators(d);
      // the group of k-tile kt-1 has completed: its stage may be overwritten
      if (kt > 0 && lane == 0) mbar_arrive(&empty[(kt - 1) % STAGES]);  // pipecheck:release
    }
    wgmma_wait<0>();
    pin_accumulators(d);

    // ---------------------------------------------------------------- epilogue (in-bounds only)
    // wgmma m64nN accumulator layout: warp w of the warpgroup holds rows 16w + lane/4 (+8); register
    // 4*j + 2*h + e holds column 8*j + 2*(lane%4) + e of row 16w + lane/4 + 8*h.
    const int warp = (threadIdx.x % 128) / 32;
    const int row_base = m0 + consumer * 64 + warp * 16 + lane / 4;
    const int col_base = n0 + 2 * (lane % 4);
    const bool pairs = (ldc % 2 == 0) && (reinterpret_cast<unsigned long long>(c) % 8 == 0);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int col = col_base + 8 * j;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row_base + 8 * h;
        if (row < m && col < n) {
          float* dst = c + static_cast<long long>(row) * ldc + col;
          const float v0 = d[4 * j + 2 * h], v1 = d[4 * j + 2 * h + 1];
          if (col + 1 < n && pairs) {
            *reinterpret_cast<Float2*>(dst) = Float2{v0, v1};
          } else {
            dst[0] = v0;
            if (col + 1 < n) dst[1] = v1;
          }
        }
      }
    }
  }
}
