// Our GEMMs against the libraries a CPU training framework would call, on the products one
// training step of the model runs: for each linear layer (qkv, attn proj, c_fc, mlp proj,
// lm head) with T = train_seq_len rows,
//   fwd    Y   = X·Wᵀ       gemm(kNo,  kYes, T, out, in)
//   dgrad  dX  = dY·W       gemm(kNo,  kNo,  T, in,  out)
//   wgrad  dW += dYᵀ·X      gemm(kYes, kNo,  out, in, T)   (beta = 1: gradients accumulate)
//
//   fp32: gemm()                         vs OpenBLAS cblas_sgemm
//   bf16: gemm_bf16() on bf16 storage    vs oneDNN matmul bf16×bf16→f32
//
//   gemm_vs_peers [--preset cpu|speedrun|all] [--seq-len T] [--dtype fp32|bf16|both]
//                 [--threads 2] [--reps 5] [--min-time 0.2] [--settle-ms 150]
//                 [--stat median|best] [--json]
//
// oneDNN runs twice per product: "plain", every operand in the row-major/transposed strides a
// training framework hands it (what a step actually faces: weights change every step and the
// wgrad operand is a fresh activation), and "packed", the weights operand given as
// format_tag::any and reordered into oneDNN's preferred layout outside the timing (its best
// case). Ours runs both ways too: on the plain operands, and with the same operand packed once
// into our kernel's layout outside the timing (kernels/matmul.hpp's PackedB, which the model's
// decoding and the fused loss's head use). The bf16 ratio is the faster of ours against the
// faster of oneDNN's for each product, so a reported win is a win over oneDNN's best by the
// same rule; the ratio of the plain layouts alone is printed beside it.
//
// Every implementation is checked before it is timed: 64 sampled entries of its output against
// a double-precision dot product of the same (bf16-rounded, for bf16) operands, as
// |C − ref| / Σ_k|a·b|, and its whole output against the peer's as max|C − C_peer| / max|C_peer|.
// Products are timed one implementation at a time (at least --reps calls and --min-time
// seconds; ratios of the median calls, or with --stat best of the fastest, which on a busy
// machine better estimates each side's unhindered speed), with a pause between implementations:
// OpenBLAS's threads spin for ~0.1 s after a call and OpenMP's for a while too, and on two cores
// that spinning would be charged to whoever runs next. Prints a table (stderr with --json) and,
// with --json, one JSON line per product and a summary line per preset on stdout. Never
// pass/fail: the machine is shared.
#include <cblas.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "kernels/bf16.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm/kernel_rate.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm_bf16.hpp"
#include "kernels/matmul.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/thread_pool.hpp"

// Declared here as well as in OpenBLAS's cblas.h: another vendor's cblas.h found first on the
// include path would not have them.
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_config(void);
extern "C" char* openblas_get_corename(void);

namespace {

using nanogpt::bf16;
using nanogpt::Trans;

struct Options {
  std::vector<std::string> presets = {"cpu", "speedrun"};
  int64_t seq_len = 0;  // 0: cpu 512 (its train_seq_len), speedrun 1024 (the issue's)
  bool fp32 = true, bf16 = true;
  int threads = 2;
  int reps = 5;
  double min_time = 0.2;
  int settle_ms = 150;
  bool best = false;  // --stat best: ratios of the fastest calls instead of the medians
  std::string omp_wait_policy = "auto";
  bool json = false;
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "gemm_vs_peers: " << problem << "\n"
            << "usage: gemm_vs_peers [--preset cpu|speedrun|all] [--seq-len T] "
               "[--dtype fp32|bf16|both] [--threads N] [--reps N] [--min-time S] "
               "[--settle-ms N] [--stat median|best] [--omp-wait-policy auto|active|passive] "
               "[--json]\n";
  std::exit(2);
}

int64_t parse_int(const std::string& flag, const char* text, int64_t min) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < min) {
    usage(flag + " wants a whole number >= " + std::to_string(min) + ", got '" + text + "'");
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--preset") {
      const std::string p = value();
      if (p == "all") {
        o.presets = {"cpu", "speedrun"};
      } else if (p == "cpu" || p == "speedrun") {
        o.presets = {p};
      } else {
        usage("--preset is cpu, speedrun or all, not '" + p + "'");
      }
    } else if (a == "--seq-len") {
      o.seq_len = parse_int(a, value(), 1);
    } else if (a == "--dtype") {
      const std::string d = value();
      if (d != "fp32" && d != "bf16" && d != "both") {
        usage("--dtype is fp32, bf16 or both, not '" + d + "'");
      }
      o.fp32 = d != "bf16";
      o.bf16 = d != "fp32";
    } else if (a == "--threads") {
      o.threads = static_cast<int>(parse_int(a, value(), 1));
    } else if (a == "--reps") {
      o.reps = static_cast<int>(parse_int(a, value(), 1));
    } else if (a == "--min-time") {
      char* end = nullptr;
      const char* text = value();
      o.min_time = std::strtod(text, &end);
      if (end == text || *end != '\0' || !(o.min_time >= 0)) {
        usage("--min-time wants seconds >= 0, got '" + std::string(text) + "'");
      }
    } else if (a == "--settle-ms") {
      o.settle_ms = static_cast<int>(parse_int(a, value(), 0));
    } else if (a == "--stat") {
      const std::string st = value();
      if (st != "median" && st != "best") usage("--stat is median or best, not '" + st + "'");
      o.best = st == "best";
    } else if (a == "--omp-wait-policy") {
      o.omp_wait_policy = value();
      if (o.omp_wait_policy != "auto" && o.omp_wait_policy != "active" &&
          o.omp_wait_policy != "passive") {
        usage("--omp-wait-policy is auto, active or passive, not '" + o.omp_wait_policy + "'");
      }
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "-h" || a == "--help") {
      usage("help");
    } else {
      usage("unknown argument '" + a + "'");
    }
  }
  return o;
}

// Cores kept busy by other processes, measured over `seconds` from /proc/stat (this process is
// idle meanwhile).
double busy_cores(double seconds) {
  auto sample = [](double& busy, double& total) {
    std::ifstream in("/proc/stat");
    std::string cpu;
    in >> cpu;
    double v[8] = {};
    for (double& x : v) in >> x;
    total = 0;
    for (double x : v) total += x;
    busy = total - v[3] - v[4];  // less idle and iowait
  };
  double b0, t0, b1, t1;
  sample(b0, t0);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  sample(b1, t1);
  const double cores = static_cast<double>(std::thread::hardware_concurrency());
  return t1 > t0 ? (b1 - b0) / (t1 - t0) * cores : 0.0;
}

// OpenMP threads (oneDNN's) spin at barriers by default. When other processes compete for the
// cores, a spinning thread burns the time slice its partner needs and a 1 ms product can take
// 100 ms: measured here under load ~10, oneDNN swung between 3 and 2600 GFLOP/s with the
// default policy and held ~1000 with OMP_WAIT_POLICY=passive. libgomp reads the policy only at
// start-up, so to change it the program runs itself again with the variable set. "auto":
// passive when more than half a core is already busy, otherwise the OpenMP default. A policy
// already in the environment is kept.
void apply_omp_wait_policy(const Options& o, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  std::string policy = o.omp_wait_policy;
  if (policy == "auto") {
    const double busy = busy_cores(0.5);
    if (busy <= 0.5) return;
    std::fprintf(stderr,
                 "gemm_vs_peers: %.1f cores busy with other work: OMP_WAIT_POLICY=passive\n", busy);
    policy = "passive";
  }
  setenv("OMP_WAIT_POLICY", policy.c_str(), 1);
  execv("/proc/self/exe", argv);
  std::perror("gemm_vs_peers: re-exec with OMP_WAIT_POLICY set");  // carry on with the default
}

// OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU's model number
// when it loads, and 0.3.21 falls back to Prescott's SSE3 kernels on a model it does not know:
// on the Xeon family 6 model 207 (KVM, no AMX exposed) that is a fifth of its AVX-512 speed, and
// a peer at a fifth of its speed is no comparison. When the core it chose lacks the widest
// vectors this CPU has, run again with OPENBLAS_CORETYPE naming the core that has them (read
// only at load, hence the re-exec), unless the user set OPENBLAS_CORETYPE.
int openblas_core_vector_level(std::string core) {
  std::transform(core.begin(), core.end(), core.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* c : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (core == c) return 3;  // AVX-512
  }
  for (const char* c : {"haswell", "zen", "excavator"}) {
    if (core == c) return 2;  // AVX2 + FMA
  }
  for (const char* c : {"sandybridge", "bulldozer", "piledriver", "steamroller"}) {
    if (core == c) return 1;  // AVX
  }
  return 0;
}

void use_openblas_widest_core(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const nanogpt::CpuInfo& cpu = nanogpt::cpu_info();
  const bool avx512 = cpu.avx512f && cpu.avx512bw && cpu.avx512vl;
  const char* want = avx512 ? "SkylakeX" : (cpu.avx2 && cpu.fma ? "Haswell" : nullptr);
  const std::string chosen = openblas_get_corename();
  if (want == nullptr || openblas_core_vector_level(chosen) >= openblas_core_vector_level(want)) {
    return;
  }
  std::fprintf(stderr,
               "gemm_vs_peers: OpenBLAS chose its %s kernels on a CPU with %s: running it with "
               "OPENBLAS_CORETYPE=%s\n",
               chosen.c_str(), avx512 ? "AVX-512" : "AVX2", want);
  setenv("OPENBLAS_CORETYPE", want, 1);
  execv("/proc/self/exe", argv);
  std::perror("gemm_vs_peers: re-exec with OPENBLAS_CORETYPE set");  // carry on as detected
}

// oneDNN here is built on OpenMP, which reads OMP_NUM_THREADS once at start-up. Looking the
// setter up at run time finds whichever OpenMP runtime libdnnl itself loaded (a link-time
// -fopenmp could bring a different one, e.g. clang's libomp beside Debian's libgomp).
bool set_openmp_threads(int n) {
  void* sym = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
  if (sym == nullptr) return false;
  void (*fn)(int) = nullptr;
  static_assert(sizeof fn == sizeof sym);
  std::memcpy(&fn, &sym, sizeof fn);
  fn(n);
  return true;
}

// 64-byte aligned storage, as a framework's allocator gives.
template <class T>
struct Buffer {
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> ptr;
  size_t n = 0;
  explicit Buffer(size_t count) : n(count) {
    const size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
    ptr.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
    if (!ptr) throw std::bad_alloc();
  }
  T* data() { return ptr.get(); }
  const T* data() const { return ptr.get(); }
  T& operator[](size_t i) { return ptr.get()[i]; }
  const T& operator[](size_t i) const { return ptr.get()[i]; }
};

struct Rng {
  uint64_t state;
  uint64_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  }
  float uniform() {  // [-1, 1)
    return static_cast<float>(static_cast<double>(next() >> 11) * 0x1p-52 - 1.0);
  }
};

// One product C = op(A)·op(B) + beta·C, M×N×K, as the model calls it.
struct Product {
  std::string name;  // e.g. "qkv.fwd"
  Trans ta, tb;
  int64_t M, N, K;
  float beta;
  int64_t per_sequence;  // how many times one sequence's forward+backward runs it
  int64_t lda() const { return ta == Trans::kNo ? K : M; }
  int64_t ldb() const { return tb == Trans::kNo ? N : K; }
  double flop() const { return 2.0 * static_cast<double>(M) * N * K; }
};

std::vector<Product> products_of(const nanogpt::Config& c, int64_t T) {
  const int64_t d = c.model_dim, hd = c.num_heads * c.head_dim;
  const int64_t attn_layers = c.num_layers - static_cast<int64_t>(c.attn_free_layers.size());
  struct Linear {
    const char* name;
    int64_t out, in, count;
  };
  const Linear layers[] = {
      {"qkv", 3 * hd, d, attn_layers},     {"attn_proj", d, hd, attn_layers},
      {"c_fc", 4 * d, d, c.num_layers},    {"mlp_proj", d, 4 * d, c.num_layers},
      {"lm_head", c.vocab_padded(), d, 1},
  };
  std::vector<Product> out;
  for (const Linear& l : layers) {
    out.push_back(
        {std::string(l.name) + ".fwd", Trans::kNo, Trans::kYes, T, l.out, l.in, 0.0f, l.count});
    out.push_back(
        {std::string(l.name) + ".dgrad", Trans::kNo, Trans::kNo, T, l.in, l.out, 0.0f, l.count});
    out.push_back(
        {std::string(l.name) + ".wgrad", Trans::kYes, Trans::kNo, l.out, l.in, T, 1.0f, l.count});
  }
  return out;
}

struct Timing {
  double median_s = 0, min_s = 0;
  int calls = 0;
};

// Median over at least `reps` calls and `min_time` seconds, after the caller's untimed check
// call has warmed caches, packing buffers and thread pools.
Timing time_calls(const std::function<void()>& call, const Options& o) {
  std::vector<double> s;
  double total = 0;
  while (static_cast<int>(s.size()) < o.reps || (total < o.min_time && s.size() < 10000)) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.push_back(dt);
    total += dt;
  }
  std::sort(s.begin(), s.end());
  Timing t;
  t.calls = static_cast<int>(s.size());
  t.median_s = s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
  t.min_s = s.front();
  return t;
}

// Element (i, j) of op(X) for X stored row-major with leading dimension ld.
template <class T>
T element(const T* X, int64_t ld, Trans t, int64_t i, int64_t j) {
  return t == Trans::kNo ? X[i * ld + j] : X[j * ld + i];
}

// Sampled check: |C − ref| / Σ_k|a·b| over `samples` entries, ref in double.
struct Samples {
  std::vector<int64_t> i, j;
  std::vector<double> ref32, scale32, ref16, scale16;
};

// Operands and outputs of one product, in both precisions.
struct Operands {
  Buffer<float> a32, b32, c0;
  Buffer<bf16> a16, b16;
  Buffer<float> c;
  Operands(const Product& p)
      : a32(static_cast<size_t>(p.M * p.K)),
        b32(static_cast<size_t>(p.K * p.N)),
        c0(static_cast<size_t>(p.M * p.N)),
        a16(a32.n),
        b16(b32.n),
        c(c0.n) {}
};

double sampled_error(const Product& p, const Samples& s, const float* C, bool bf16_ref) {
  double worst = 0;
  for (size_t k = 0; k < s.i.size(); ++k) {
    const double ref = bf16_ref ? s.ref16[k] : s.ref32[k];
    const double scale = bf16_ref ? s.scale16[k] : s.scale32[k];
    const double e =
        std::abs(static_cast<double>(C[s.i[k] * p.N + s.j[k]]) - ref) / std::max(scale, 1e-30);
    worst = std::max(worst, e);
  }
  return worst;
}

double relative_difference(const float* C, const float* peer, size_t n) {
  double diff = 0, mag = 0;
  for (size_t k = 0; k < n; ++k) {
    diff = std::max(diff, std::abs(static_cast<double>(C[k]) - peer[k]));
    mag = std::max(mag, std::abs(static_cast<double>(peer[k])));
  }
  return diff / std::max(mag, 1e-30);
}

// oneDNN matmul for a Product. dims {M,K}·{K,N}; a transposed operand is the same dims with
// swapped strides, which is how a framework passes a .T view.
struct OneDnnMatmul {
  dnnl::matmul prim;
  dnnl::memory src, wei, dst;
  std::string impl;
  bool weights_reordered = false;

  OneDnnMatmul(const Product& p, dnnl::engine& eng, dnnl::stream& strm, bf16* a, bf16* b, float* c,
               bool packed_weights) {
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    const dims a_strides = p.ta == Trans::kNo ? dims{p.lda(), 1} : dims{1, p.lda()};
    const dims b_strides = p.tb == Trans::kNo ? dims{p.ldb(), 1} : dims{1, p.ldb()};
    const dnnl::memory::desc src_md({p.M, p.K}, dt::bf16, a_strides);
    const dnnl::memory::desc wei_plain({p.K, p.N}, dt::bf16, b_strides);
    const dnnl::memory::desc dst_md({p.M, p.N}, dt::f32, dims{p.N, 1});
    const dnnl::memory::desc wei_md =
        packed_weights ? dnnl::memory::desc({p.K, p.N}, dt::bf16, dnnl::memory::format_tag::any)
                       : wei_plain;
    dnnl::primitive_attr attr;
    if (p.beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(p.beta);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), attr, eng);
    impl = pd.impl_info_str();
    prim = dnnl::matmul(pd);
    src = dnnl::memory(src_md, eng, a);
    dst = dnnl::memory(dst_md, eng, c);
    dnnl::memory user_wei(wei_plain, eng, b);
    if (pd.weights_desc() != wei_plain) {
      wei = dnnl::memory(pd.weights_desc(), eng);
      dnnl::reorder(user_wei, wei).execute(strm, user_wei, wei);
      strm.wait();
      weights_reordered = true;
    } else {
      wei = user_wei;
    }
  }

  void run(dnnl::stream& strm) {
    prim.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    strm.wait();
  }
};

CBLAS_TRANSPOSE cblas_trans(Trans t) {
  return t == Trans::kNo ? CblasNoTrans : CblasTrans;
}

// One implementation's measurement of one product.
struct Measured {
  bool ran = false;
  double gflops = 0, seconds = 0;  // by --stat: the median call, or the fastest
  double median_gflops = 0, best_gflops = 0;
  double err = 0;   // sampled, against the double reference
  double diff = 0;  // whole output against the peer (ours) or ours (peer)
  int calls = 0;
  std::string impl;
};

struct Row {
  Product p;
  Measured ours32, blas, ours16, ours16_packed, dnnl_plain, dnnl_packed;
  double load = 0;
};

void settle(const Options& o) {
  std::this_thread::sleep_for(std::chrono::milliseconds(o.settle_ms));
}

Row measure(const Product& p, const Options& o, nanogpt::ThreadPool& pool, dnnl::engine& eng,
            dnnl::stream& strm, uint64_t seed) {
  Row row{p, {}, {}, {}, {}, {}, {}, nanogpt::load_average()};
  Operands x(p);
  Rng rng{seed * 0x9E3779B97F4A7C15ull + 1};
  for (size_t k = 0; k < x.a32.n; ++k) x.a32[k] = rng.uniform();
  for (size_t k = 0; k < x.b32.n; ++k) x.b32[k] = rng.uniform();
  for (size_t k = 0; k < x.c0.n; ++k) x.c0[k] = p.beta != 0.0f ? rng.uniform() : 0.0f;
  for (size_t k = 0; k < x.a32.n; ++k) x.a16[k] = nanogpt::to_bf16(x.a32[k]);
  for (size_t k = 0; k < x.b32.n; ++k) x.b16[k] = nanogpt::to_bf16(x.b32[k]);

  Samples s;
  for (int k = 0; k < 64; ++k) {
    const int64_t i = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(p.M));
    const int64_t j = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(p.N));
    double r32 = 0, s32 = 0, r16 = 0, s16 = 0;
    for (int64_t q = 0; q < p.K; ++q) {
      const double a = element(x.a32.data(), p.lda(), p.ta, i, q);
      const double b = element(x.b32.data(), p.ldb(), p.tb, q, j);
      const double ah = nanogpt::to_float(element(x.a16.data(), p.lda(), p.ta, i, q));
      const double bh = nanogpt::to_float(element(x.b16.data(), p.ldb(), p.tb, q, j));
      r32 += a * b;
      s32 += std::abs(a * b);
      r16 += ah * bh;
      s16 += std::abs(ah * bh);
    }
    const double c0 = p.beta * static_cast<double>(x.c0[i * p.N + j]);
    s.i.push_back(i);
    s.j.push_back(j);
    s.ref32.push_back(r32 + c0);
    s.scale32.push_back(s32 + std::abs(c0));
    s.ref16.push_back(r16 + c0);
    s.scale16.push_back(s16 + std::abs(c0));
  }

  const size_t n_out = x.c.n;
  std::vector<float> first;  // the first implementation's checked output of this dtype
  auto run_one = [&](Measured& m, const std::function<void()>& call, bool bf16_ref) {
    std::memcpy(x.c.data(), x.c0.data(), n_out * sizeof(float));
    call();
    m.err = sampled_error(p, s, x.c.data(), bf16_ref);
    if (first.empty()) {
      first.assign(x.c.data(), x.c.data() + n_out);
    } else {
      m.diff = relative_difference(first.data(), x.c.data(), n_out);
    }
    const Timing t = time_calls(call, o);
    m.ran = true;
    m.seconds = o.best ? t.min_s : t.median_s;
    m.calls = t.calls;
    m.gflops = p.flop() / m.seconds * 1e-9;
    m.median_gflops = p.flop() / t.median_s * 1e-9;
    m.best_gflops = p.flop() / t.min_s * 1e-9;
    settle(o);
  };

  if (o.fp32) {
    run_one(
        row.ours32,
        [&] {
          nanogpt::ThreadPool::Use use(pool);
          nanogpt::gemm(p.ta, p.tb, p.M, p.N, p.K, 1.0f, x.a32.data(), p.lda(), x.b32.data(),
                        p.ldb(), p.beta, x.c.data(), p.N);
        },
        false);
    run_one(
        row.blas,
        [&] {
          cblas_sgemm(CblasRowMajor, cblas_trans(p.ta), cblas_trans(p.tb), static_cast<int>(p.M),
                      static_cast<int>(p.N), static_cast<int>(p.K), 1.0f, x.a32.data(),
                      static_cast<int>(p.lda()), x.b32.data(), static_cast<int>(p.ldb()), p.beta,
                      x.c.data(), static_cast<int>(p.N));
        },
        false);
    row.ours32.diff = row.blas.diff;
    first.clear();
  }
  if (o.bf16) {
    run_one(
        row.ours16,
        [&] {
          nanogpt::ThreadPool::Use use(pool);
          nanogpt::gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, 1.0f, x.a16.data(), p.lda(), x.b16.data(),
                             p.ldb(), p.beta, x.c.data(), p.N);
        },
        true);
    // op(B) packed once, outside the timing, as oneDNN's reordered weights are below.
    nanogpt::PackedB packed_b;
    {
      nanogpt::ThreadPool::Use use(pool);
      nanogpt::pack_matmul_b(nanogpt::Precision::kBf16, p.tb, p.K, p.N, x.b32.data(), p.ldb(),
                             packed_b);
    }
    run_one(
        row.ours16_packed,
        [&] {
          nanogpt::ThreadPool::Use use(pool);
          nanogpt::matmul(p.ta, p.M, 1.0f, x.a16.data(), p.lda(), packed_b, p.beta, x.c.data(),
                          p.N);
        },
        true);
    for (bool packed : {false, true}) {
      Measured& m = packed ? row.dnnl_packed : row.dnnl_plain;
      OneDnnMatmul mm(p, eng, strm, x.a16.data(), x.b16.data(), x.c.data(), packed);
      m.impl = mm.impl + (mm.weights_reordered ? " (weights reordered)" : "");
      run_one(
          m, [&] { mm.run(strm); }, true);
    }
    row.ours16.diff = std::max(row.dnnl_plain.diff, row.dnnl_packed.diff);
    row.ours16_packed.diff = std::max(row.ours16_packed.diff, row.ours16.diff);
  }
  return row;
}

double ratio(const Measured& ours, const Measured& peer) {
  return ours.ran && peer.ran && peer.gflops > 0 ? ours.gflops / peer.gflops : 0.0;
}

// The faster of oneDNN's two layouts for this product.
const Measured& dnnl_best(const Row& r) {
  return r.dnnl_packed.gflops > r.dnnl_plain.gflops ? r.dnnl_packed : r.dnnl_plain;
}

// The faster of our two layouts.
const Measured& ours16_best(const Row& r) {
  return r.ours16_packed.gflops > r.ours16.gflops ? r.ours16_packed : r.ours16;
}

std::string trans_name(Trans t) {
  return t == Trans::kNo ? "N" : "T";
}

void print_header(std::FILE* out, const std::string& preset, int64_t T, const Options& o) {
  std::fprintf(out, "\npreset %s, T=%lld, %d threads, load %.2f; GFLOP/s (%s of >= %d calls)\n",
               preset.c_str(), static_cast<long long>(T), o.threads, nanogpt::load_average(),
               o.best ? "fastest" : "median", o.reps);
  std::fprintf(out, "%-16s %6s %6s %6s |", "product", "M", "N", "K");
  if (o.fp32) std::fprintf(out, " %8s %8s %6s %8s |", "ours32", "OpenBLAS", "ratio", "err");
  if (o.bf16) {
    std::fprintf(out, " %8s %8s %8s %8s %6s %6s %8s", "ours16", "ours-pk", "dnnl", "dnnl-pk",
                 "ratio", "/plain", "err");
  }
  std::fprintf(out, "\n");
}

// Above this an answer is wrong, not rounded differently: fp32 accumulation over K ≤ 50304
// terms stays near √K·2⁻²⁴ ≈ 1e-5 of Σ|a·b| (the worst case K·2⁻²⁴ is 3e-3 only when every
// rounding goes one way).
constexpr double kWrongAnswer = 1e-3;

double worst_error(const Row& r, bool bf16) {
  return bf16 ? std::max({r.ours16.err, r.ours16_packed.err, r.dnnl_plain.err, r.dnnl_packed.err,
                          r.ours16.diff, r.ours16_packed.diff})
              : std::max({r.ours32.err, r.blas.err, r.ours32.diff});
}

void print_row(std::FILE* out, const Row& r, const Options& o) {
  std::fprintf(out, "%-16s %6lld %6lld %6lld |", r.p.name.c_str(), static_cast<long long>(r.p.M),
               static_cast<long long>(r.p.N), static_cast<long long>(r.p.K));
  if (o.fp32) {
    std::fprintf(out, " %8.1f %8.1f %6.2f %8.1e |", r.ours32.gflops, r.blas.gflops,
                 ratio(r.ours32, r.blas), worst_error(r, false));
  }
  if (o.bf16) {
    std::fprintf(out, " %8.1f %8.1f %8.1f %8.1f %6.2f %6.2f %8.1e", r.ours16.gflops,
                 r.ours16_packed.gflops, r.dnnl_plain.gflops, r.dnnl_packed.gflops,
                 ratio(ours16_best(r), dnnl_best(r)), ratio(r.ours16, r.dnnl_plain),
                 worst_error(r, true));
  }
  if ((o.fp32 && worst_error(r, false) > kWrongAnswer) ||
      (o.bf16 && worst_error(r, true) > kWrongAnswer)) {
    std::fprintf(out, "  WRONG ANSWER: do not compare");
  }
  std::fprintf(out, "\n");
}

nlohmann::ordered_json measured_json(const Measured& m) {
  nlohmann::ordered_json j = {{"gflops", m.gflops},
                              {"median_gflops", m.median_gflops},
                              {"best_gflops", m.best_gflops},
                              {"seconds", m.seconds},
                              {"calls", m.calls},
                              {"sampled_err", m.err},
                              {"max_rel_diff", m.diff}};
  if (!m.impl.empty()) j["impl"] = m.impl;
  return j;
}

nlohmann::ordered_json row_json(const std::string& preset, int64_t T, const Row& r,
                                const Options& o) {
  nlohmann::ordered_json j = {{"preset", preset},
                              {"seq_len", T},
                              {"product", r.p.name},
                              {"trans_a", trans_name(r.p.ta)},
                              {"trans_b", trans_name(r.p.tb)},
                              {"M", r.p.M},
                              {"N", r.p.N},
                              {"K", r.p.K},
                              {"beta", r.p.beta},
                              {"gflop", r.p.flop() * 1e-9},
                              {"per_sequence", r.p.per_sequence},
                              {"threads", o.threads},
                              {"stat", o.best ? "best" : "median"},
                              {"loadavg", r.load}};
  if (o.fp32) {
    j["ours_fp32"] = measured_json(r.ours32);
    j["openblas_fp32"] = measured_json(r.blas);
    j["ratio_fp32"] = ratio(r.ours32, r.blas);
    j["agree_fp32"] = worst_error(r, false) <= kWrongAnswer;
  }
  if (o.bf16) {
    j["ours_bf16"] = measured_json(r.ours16);
    j["ours_bf16_packed"] = measured_json(r.ours16_packed);
    j["onednn_bf16_plain"] = measured_json(r.dnnl_plain);
    j["onednn_bf16_packed"] = measured_json(r.dnnl_packed);
    j["ratio_bf16"] = ratio(ours16_best(r), dnnl_best(r));
    j["ratio_bf16_vs_plain"] = ratio(r.ours16, r.dnnl_plain);
    j["agree_bf16"] = worst_error(r, true) <= kWrongAnswer;
  }
  return j;
}

// Geometric mean of per-product ratios, and the ratio of the time one sequence's
// forward+backward spends in these products (each weighted by how often a sequence runs it).
struct Aggregate {
  double log_sum = 0;
  int n = 0;
  double ours_s = 0, peer_s = 0;
  void add(const Product& p, const Measured& ours, const Measured& peer) {
    if (!ours.ran || !peer.ran) return;
    log_sum += std::log(ours.gflops / peer.gflops);
    ++n;
    ours_s += static_cast<double>(p.per_sequence) * ours.seconds;
    peer_s += static_cast<double>(p.per_sequence) * peer.seconds;
  }
  double geomean() const { return n ? std::exp(log_sum / n) : 0.0; }
  double weighted() const { return ours_s > 0 ? peer_s / ours_s : 0.0; }
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  use_openblas_widest_core(argv);
  apply_omp_wait_policy(o, argv);
  const char* wait_env = std::getenv("OMP_WAIT_POLICY");
  const std::string wait_policy = wait_env != nullptr ? wait_env : "default";
  std::FILE* table = o.json ? stderr : stdout;

  openblas_set_num_threads(o.threads);
  const bool omp_set = set_openmp_threads(o.threads);
  nanogpt::ThreadPool pool(o.threads);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);

  const dnnl_version_t* dv = dnnl_version();
  const nanogpt::CpuInfo& cpu = nanogpt::cpu_info();
  std::fprintf(table, "cpu: %s (avx512_bf16 %d, amx_bf16 %d)\n", cpu.model_name.c_str(),
               cpu.avx512_bf16 ? 1 : 0, cpu.amx_bf16 ? 1 : 0);
  // Our kernels take the best ISA the CPU has unless NANOGPT_ISA caps it (scalar, avx2,
  // avx512, amx): say which, or a capped run passes for the default.
  const char* isa_env = std::getenv("NANOGPT_ISA");
  const std::string isa_cap = isa_env != nullptr && *isa_env != '\0' ? isa_env : "best";
  std::fprintf(table, "nanogpt: ISA %s (NANOGPT_ISA)\n", isa_cap.c_str());
  const char* core_env = std::getenv("OPENBLAS_CORETYPE");
  std::fprintf(table, "OpenBLAS: %s [core %s%s]\n", openblas_get_config(), openblas_get_corename(),
               core_env != nullptr ? ", as OPENBLAS_CORETYPE" : "");
  std::fprintf(
      table, "oneDNN: %d.%d.%d, OpenMP wait policy %s, threads %s\n", dv->major, dv->minor,
      dv->patch, wait_policy.c_str(),
      omp_set ? std::to_string(o.threads).c_str() : "(runtime not found: as OMP_NUM_THREADS)");
  std::fprintf(table,
               "ratio = ours / peer; bf16 ratio is our faster layout against oneDNN's faster "
               "(-pk: the weights operand packed ahead, outside the timing), /plain the plain "
               "strides of both; err = worst of the sampled error vs double and the "
               "difference from the peer\n");

  uint64_t seed = 1;
  for (const std::string& name : o.presets) {
    const nanogpt::Config config = nanogpt::preset(name);
    const int64_t T =
        o.seq_len > 0 ? o.seq_len : (name == "speedrun" ? 1024 : config.train_seq_len);
    const double load_before = nanogpt::load_average();
    // What the host gave our bf16 micro-kernel alone before and after the preset's products
    // (kernels/gemm/kernel_rate.hpp): the AMX Xeon's tile unit changes rate ~3x within seconds.
    const nanogpt::KernelRate kernel_before =
        nanogpt::measure_kernel_rate(nanogpt::active_bf16_microkernel(), 0.25);
    print_header(table, name, T, o);
    Aggregate fp32, bf16_best, bf16_plain;
    double best_ours16 = 0, best_any16 = 0, best_ours32 = 0;
    for (const Product& p : products_of(config, T)) {
      const Row r = measure(p, o, pool, eng, strm, seed++);
      print_row(table, r, o);
      std::fflush(table);
      if (o.json) std::printf("%s\n", row_json(name, T, r, o).dump().c_str());
      std::fflush(stdout);
      fp32.add(p, r.ours32, r.blas);
      bf16_best.add(p, ours16_best(r), dnnl_best(r));
      bf16_plain.add(p, r.ours16, r.dnnl_plain);
      best_ours32 = std::max(best_ours32, r.ours32.gflops);
      best_ours16 = std::max(best_ours16, ours16_best(r).gflops);
      best_any16 =
          std::max({best_any16, ours16_best(r).gflops, r.dnnl_plain.gflops, r.dnnl_packed.gflops});
    }
    const double load_after = nanogpt::load_average();
    const nanogpt::KernelRate kernel_after =
        nanogpt::measure_kernel_rate(nanogpt::active_bf16_microkernel(), 0.25);
    std::fprintf(table,
                 "%s summary (load %.2f -> %.2f; our bf16 %s kernel alone %.0f -> %.0f GFLOP/s "
                 "per thread):",
                 name.c_str(), load_before, load_after, kernel_before.isa,
                 kernel_before.median_gflops, kernel_after.median_gflops);
    if (o.fp32) {
      std::fprintf(table, " fp32 vs OpenBLAS geomean %.2fx, per-sequence time %.2fx;",
                   fp32.geomean(), fp32.weighted());
    }
    if (o.bf16) {
      std::fprintf(table,
                   " bf16 best vs oneDNN best geomean %.2fx, per-sequence time %.2fx (plain only: "
                   "%.2fx, %.2fx); best bf16 %.1f GFLOP/s (ours %.1f)",
                   bf16_best.geomean(), bf16_best.weighted(), bf16_plain.geomean(),
                   bf16_plain.weighted(), best_any16, best_ours16);
    }
    std::fprintf(table, "\n");
    if (o.json) {
      nlohmann::ordered_json j = {{"preset", name},
                                  {"summary", true},
                                  {"seq_len", T},
                                  {"threads", o.threads},
                                  {"stat", o.best ? "best" : "median"},
                                  {"cpu", cpu.model_name},
                                  {"nanogpt_isa", isa_cap},
                                  {"omp_wait_policy", wait_policy},
                                  {"loadavg_before", load_before},
                                  {"loadavg_after", load_after},
                                  {"kernel_gflops_before", kernel_before.median_gflops},
                                  {"kernel_gflops_after", kernel_after.median_gflops}};
      if (o.fp32) {
        j["geomean_ratio_fp32"] = fp32.geomean();
        j["per_sequence_ratio_fp32"] = fp32.weighted();
        j["best_ours_fp32_gflops"] = best_ours32;
      }
      if (o.bf16) {
        j["geomean_ratio_bf16"] = bf16_best.geomean();
        j["per_sequence_ratio_bf16"] = bf16_best.weighted();
        j["geomean_ratio_bf16_vs_plain"] = bf16_plain.geomean();
        j["per_sequence_ratio_bf16_vs_plain"] = bf16_plain.weighted();
        j["best_ours_bf16_gflops"] = best_ours16;
        j["best_bf16_gflops"] = best_any16;
      }
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
