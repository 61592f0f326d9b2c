/*===- attn-c/Attnc.h - C API over the attnc JIT and runtime ------*- C -*-===*\
|*                                                                            *|
|* A plain C interface to attn::Compiler (the JIT) and attn::Kernel (the      *|
|* launches), for languages that cannot call C++: the Python package loads    *|
|* libattnc_c.so with ctypes through it. It holds no Python, no libtorch and  *|
|* no MLIR type; tensors cross as pointers, shapes, strides and dtypes, and   *|
|* launches take the caller's CUstream as a `void *`.                         *|
|*                                                                            *|
|* Every function that can fail returns an attnc_status: ATTNC_OK (0), or     *|
|* ATTNC_ERROR with the message (the same text the C++ attn::Error carries:   *|
|* "q: ...", "dk: ...", a spec's diagnostics with buffer:line:col) kept for   *|
|* the calling thread until its next failing call (attnc_last_error). A null  *|
|* handle or output pointer is an error too, never a crash.                   *|
|*                                                                            *|
|* The argument structs hold only 8-byte fields (pointers, int64_t, uint64_t, *|
|* double), so a caller can lay them out as an array of 8-byte words; their   *|
|* sizes are fixed by static assertions in the implementation.                *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/
#ifndef ATTN_C_ATTNC_H
#define ATTN_C_ATTNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a struct or function below changes. */
#define ATTNC_C_API_VERSION 6

typedef int32_t attnc_status;
enum { ATTNC_OK = 0, ATTNC_ERROR = 1 };

/* Element types (attn::DType's order). */
enum { ATTNC_BF16 = 0, ATTNC_F16 = 1, ATTNC_F32 = 2, ATTNC_I32 = 3 };

typedef struct attnc_compiler attnc_compiler;
typedef struct attnc_kernel attnc_kernel;
/* Device memory the library allocated (a tile coverage, its key bits). */
typedef struct attnc_buffer attnc_buffer;

/* A device tensor. Attention operands have rank 4 in BSHD order ([batch,
 * seq, heads, head_dim], any strides the launch accepts); captured buffers
 * have rank 1 to 3 and must be contiguous row-major. Strides count
 * elements; entries past `rank` are ignored. 88 bytes. */
typedef struct {
  void *data;
  int64_t dtype;
  int64_t rank;
  int64_t shape[4];
  int64_t strides[4];
} attnc_tensor;

/* Packed (variable-length) sequences, attn::PackedSequences: all zero for a
 * padded batch. 40 bytes. */
typedef struct {
  const int32_t *cu_seqlens_q;
  const int32_t *cu_seqlens_k;
  int64_t batch;
  int64_t max_seqlen_q;
  int64_t max_seqlen_k;
} attnc_packed;

/* A paged KV cache, attn::PagedKvCache (the vLLM / FlashInfer convention):
 * all zero for contiguous k and v. With it k and v are page pools
 * [pages, page_size, kv_heads, head_dim]; sequence b's key j lies in page
 * block_table[b * block_table_stride + j / page_size], row j % page_size;
 * block_table holds batch rows of max_pages device int32 entries, seqlens_k
 * the batch's key lengths (device int32, each at most max_seqlen_k). 40
 * bytes. */
typedef struct {
  const int32_t *block_table;
  int64_t block_table_stride;
  int64_t max_pages;
  const int32_t *seqlens_k;
  int64_t max_seqlen_k;
} attnc_paged;

/* attn::AttnForwardArgs. lse: [B, Hq, Sq] fp32 (or [Hq, total_q] packed).
 * The optional buffers (tile_coverage, tile_key_bits, work_order,
 * workspace) may be null. key_splits chooses the short-query (split-KV)
 * path, zero meaning the default: 0 lets the launch choose it and its split
 * count (attn::AttnForwardArgs::keySplits = -1), -1 keeps the forward
 * kernel (keySplits = 0), k >= 1 takes it with k splits. A paged call takes
 * the path (kernels compiled here do not read pages on the forward kernel:
 * attn::CompileOptions::pagedKv is not an option of this API). 504 bytes. */
typedef struct {
  attnc_tensor q, k, v, o;
  float *lse;
  const attnc_tensor *captures;
  int64_t num_captures;
  attnc_packed packed;
  const void *tile_coverage;
  const void *tile_key_bits;
  const int32_t *work_order;
  void *workspace;
  uint64_t workspace_bytes;
  attnc_paged paged;
  int64_t key_splits;
} attnc_forward_args;

/* attn::AttnBackwardArgs. d_o is dO; deterministic is 0 or 1. captures as
 * the forward's; capture_grads: one f32 buffer per capture declared with
 * `grad`, in declaration order, shaped as it (overwritten with its
 * gradient). tile_coverage (may be null): the forward kernel's, with that
 * kernel's block_m and block_n. capture_grad_atomics: 0 sums the capture
 * gradients exactly (the same bits on every run), 1 with float atomics
 * (CaptureGradSum::Atomic). 840 bytes. */
typedef struct {
  attnc_tensor q, k, v, o, d_o;
  const float *lse;
  attnc_tensor dq, dk, dv;
  attnc_packed packed;
  void *workspace;
  uint64_t workspace_bytes;
  int64_t deterministic;
  const attnc_tensor *captures;
  int64_t num_captures;
  const attnc_tensor *capture_grads;
  int64_t num_capture_grads;
  const void *tile_coverage;
  int64_t coverage_block_m;
  int64_t coverage_block_n;
  int64_t capture_grad_atomics;
} attnc_backward_args;

/* attn::AttnLinearArgs (linear attention and retention over a sequence;
 * also the one-token decode step). State pointers may be null. 416 bytes. */
typedef struct {
  attnc_tensor q, k, v, o;
  const float *initial_state;
  float *final_state;
  const float *initial_key_sum;
  float *final_key_sum;
  const float *log_decay;
  void *workspace;
  uint64_t workspace_bytes;
  int64_t segments;
} attnc_linear_args;

/* attn::AttnLinearBackwardArgs (the backward module of linear attention or
 * retention): d_o is dO; log_decay and d_log_decay [B, S, Hq] f32 (gated
 * only; d_log_decay null: not computed); initial_state, d_final_state and
 * d_initial_state [B, Hq, D, D] f32 (null: zero / zero / not computed).
 * Normalized linear attention only (all zero otherwise): o, the forward's
 * output; initial_key_sum, d_final_key_sum and d_initial_key_sum
 * [B, Hq, D] f32 (null: zero / zero / not computed). 784 bytes. */
typedef struct {
  attnc_tensor q, k, v, d_o, dq, dk, dv;
  const float *log_decay;
  float *d_log_decay;
  const float *initial_state;
  const float *d_final_state;
  float *d_initial_state;
  void *workspace;
  uint64_t workspace_bytes;
  attnc_tensor o;
  const float *initial_key_sum;
  const float *d_final_key_sum;
  float *d_initial_key_sum;
} attnc_linear_backward_args;

/* What a compiled kernel's plan fixes (attn::AttnLaunchConfig). 128 bytes. */
typedef struct {
  int64_t head_dim, q_heads, kv_heads, dtype;
  double scale;
  int64_t block_m, block_n, threads_per_block, shared_memory_bytes;
  int64_t linear_family, backward, causal, normalize, gated;
  int64_t num_captures;
  int64_t automatic_work_order;
} attnc_kernel_info;

/* Where compile() found its kernels (attn::JitStats). 24 bytes. */
typedef struct {
  uint64_t memory_hits, disk_hits, compiles;
} attnc_jit_stats;

/* The library's version ("0.1.0") and ATTNC_C_API_VERSION as built. */
const char *attnc_version(void);
int32_t attnc_c_api_version(void);
/* The message of this thread's last failed call ("" if none). */
const char *attnc_last_error(void);

/* A JIT compiler (attn::Compiler). tuning_database: NULL for the default
 * path, "" for none; cache_dir: NULL for the environment's default
 * (ATTNC_CACHE_DIR), "" to turn the disk cache off. */
attnc_status attnc_compiler_create(const char *tuning_database, const char *cache_dir,
                                   attnc_compiler **out);
void attnc_compiler_destroy(attnc_compiler *compiler);
attnc_status attnc_compiler_stats(const attnc_compiler *compiler, attnc_jit_stats *out);

/* Compiles (or finds in the caches) the kernel of MLIR text holding one
 * attn.kernel; buffer_name names it in diagnostics. backward = 1 compiles
 * the spec's backward module instead (attn::Compiler::compileBackward).
 * Works without a GPU; the module loads on the first launch. */
attnc_status attnc_compile(attnc_compiler *compiler, const char *spec_text,
                           const char *buffer_name, int32_t backward, attnc_kernel **out);
void attnc_kernel_destroy(attnc_kernel *kernel);
attnc_status attnc_kernel_get_info(const attnc_kernel *kernel, attnc_kernel_info *out);
/* The kernel's PTX (NUL-terminated, owned by the kernel; *size without the
 * NUL), or NULL with an error when it carries only a cubin. */
const char *attnc_kernel_ptx(const attnc_kernel *kernel, size_t *size);
/* Loads the module into the current CUDA context (attn::Kernel::load). */
attnc_status attnc_kernel_load(const attnc_kernel *kernel);

/* Launches; each validates every argument first and launches nothing after
 * a failed check (the message names the argument). */
attnc_status attnc_run_forward(const attnc_kernel *kernel, const attnc_forward_args *args,
                               void *stream);
attnc_status attnc_run_backward(const attnc_kernel *kernel, const attnc_backward_args *args,
                                void *stream);
attnc_status attnc_run_linear(const attnc_kernel *kernel, const attnc_linear_args *args,
                              void *stream);
attnc_status attnc_run_decode(const attnc_kernel *kernel, const attnc_linear_args *args,
                              void *stream);
attnc_status attnc_run_linear_backward(const attnc_kernel *kernel,
                                       const attnc_linear_backward_args *args, void *stream);

/* Workspace sizes (validating the shapes): the forward's tail split
 * (0 where the kernel cannot use one), the backward's and the linear
 * family's sequence split. */
attnc_status attnc_forward_workspace_bytes(const attnc_kernel *kernel,
                                           const attnc_forward_args *args, uint64_t *out);
attnc_status attnc_backward_workspace_bytes(const attnc_kernel *kernel,
                                            const attnc_backward_args *args, uint64_t *out);
/* The workspace that lets a linear-family launch split its sequence over
 * more blocks (attn::linearWorkspaceBytes of the runtime's split for these
 * shapes and args->segments on the current device; 0 when no split pays). */
attnc_status attnc_linear_workspace_bytes(const attnc_kernel *kernel,
                                          const attnc_linear_args *args, uint64_t *out);
/* The workspace of a linear-family backward with these arguments
 * (attn::linearBackwardWorkspaceBytes; often 0). */
attnc_status attnc_linear_backward_workspace_bytes(const attnc_kernel *kernel,
                                                   const attnc_linear_backward_args *args,
                                                   uint64_t *out);

/* The masks' tile coverage and its key bits for these shapes and captures
 * (attn::Kernel::buildTileCoverage / buildTileKeyBits; the key bits need
 * args->tile_coverage set and synchronize `stream`). */
attnc_status attnc_build_tile_coverage(const attnc_kernel *kernel,
                                       const attnc_forward_args *args, void *stream,
                                       attnc_buffer **out);
attnc_status attnc_build_tile_key_bits(const attnc_kernel *kernel,
                                       const attnc_forward_args *args, void *stream,
                                       attnc_buffer **out);
void *attnc_buffer_data(const attnc_buffer *buffer);
uint64_t attnc_buffer_bytes(const attnc_buffer *buffer);
void attnc_buffer_destroy(attnc_buffer *buffer);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_C_ATTNC_H */
