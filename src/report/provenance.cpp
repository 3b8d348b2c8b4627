// src/report/provenance.cpp — version, git revision, argv and model-file digests of a run
// (mla/provenance.hpp). SHA-256 as FIPS 180-4 §6.2 defines it: a 64-round compression of
// 512-bit blocks over eight 32-bit words, the message padded with 0x80, zeros and its bit length.
// The compression runs on x86's SHA extensions when the CPU has them (about 10x the portable
// code's speed: the model files' digests are inside eval's wall time, docs/eval.md §9).
#include "mla/provenance.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "mla/error.hpp"
#include "mla/report.hpp"
#include "mla_build_config.h"
#include "mla/threads.hpp"  // parallel_for
#include "src/report/mla_revision.h"

namespace mla {
namespace {

// FIPS 180-4 §4.2.2: the first 32 bits of the fractional parts of the cube roots of the first 64 primes.
constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// §6.2.2 on one 64-byte block, in portable code.
void block_portable(std::array<uint32_t, 8>& state, const uint8_t* p) {
  uint32_t w[64];  // step 1: the message schedule
  for (int t = 0; t < 16; ++t)
    w[t] = uint32_t{p[4 * t]} << 24 | uint32_t{p[4 * t + 1]} << 16 | uint32_t{p[4 * t + 2]} << 8 | uint32_t{p[4 * t + 3]};
  for (int t = 16; t < 64; ++t) {
    const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5], g = state[6],
           h = state[7];
  for (int t = 0; t < 64; ++t) {  // steps 2-3
    const uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25), ch = (e & f) ^ (~e & g);
    const uint32_t t1 = h + S1 + ch + kRound[t] + w[t];
    const uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22), maj = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = S0 + maj;
    h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
  }
  state[0] += a; state[1] += b; state[2] += c; state[3] += d;  // step 4
  state[4] += e; state[5] += f; state[6] += g; state[7] += h;
}

#if defined(__x86_64__)
bool cpu_has_sha_ni() {  // CPUID leaf 7: EBX bit 29 SHA; leaf 1: ECX bits 9 SSSE3, 19 SSE4.1
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 29))) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  return (c & (1u << 9)) && (c & (1u << 19));
}

// The same §6.2.2 on `count` blocks with the SHA extensions. The state lives as the two registers
// sha256rnds2 takes, ABEF and CDGH; each group of 4 rounds adds its 4 schedule words W_t + K_t and
// runs two sha256rnds2 (2 rounds each); sha256msg1 and sha256msg2 extend the schedule 4 words at a
// time (W_t = sigma1(W_{t-2}) + W_{t-7} + sigma0(W_{t-15}) + W_{t-16}).
__attribute__((target("sha,sse4.1,ssse3"))) void blocks_sha_ni(std::array<uint32_t, 8>& state, const uint8_t* p,
                                                                size_t count) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);  // big-endian words
  __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[0])), 0xB1);  // CDAB
  __m128i cdgh = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[4])), 0x1B);  // EFGH
  __m128i abef = _mm_alignr_epi8(tmp, cdgh, 8);
  cdgh = _mm_blend_epi16(cdgh, tmp, 0xF0);
  for (; count > 0; --count, p += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i m[4];  // W of rounds 4g .. 4g+3 in m[g % 4]
    for (int g = 0; g < 16; ++g) {
      __m128i& cur = m[g % 4];
      if (g < 4) cur = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * g)), byte_swap);
      __m128i wk = _mm_add_epi32(cur, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kRound + 4 * g)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
      if (g >= 3 && g <= 14) {  // W of group g + 1 (its sha256msg1 part was added at g - 2)
        __m128i& next = m[(g + 1) % 4];
        next = _mm_sha256msg2_epu32(_mm_add_epi32(next, _mm_alignr_epi8(cur, m[(g + 3) % 4], 4)), cur);
      }
      wk = _mm_shuffle_epi32(wk, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, wk);
      if (g >= 1 && g <= 12) m[(g + 3) % 4] = _mm_sha256msg1_epu32(m[(g + 3) % 4], cur);
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  tmp = _mm_shuffle_epi32(abef, 0x1B);   // FEBA
  cdgh = _mm_shuffle_epi32(cdgh, 0xB1);  // DCHG
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[0]), _mm_blend_epi16(tmp, cdgh, 0xF0));  // DCBA
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[4]), _mm_alignr_epi8(cdgh, tmp, 8));     // HGFE
}
#else
bool cpu_has_sha_ni() { return false; }
void blocks_sha_ni(std::array<uint32_t, 8>&, const uint8_t*, size_t) {}
#endif

std::atomic<bool>& use_sha_ni() {
  static std::atomic<bool> on{cpu_has_sha_ni()};
  return on;
}

std::vector<std::string>& argv_store() {
  static std::vector<std::string> argv;
  return argv;
}

}  // namespace

Sha256::Sha256()  // §5.3.3: the first 32 bits of the fractional parts of the square roots of the first 8 primes
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

bool sha256_extensions() { return use_sha_ni().load(std::memory_order_relaxed); }
bool set_sha256_extensions(bool on) {
  use_sha_ni().store(on && cpu_has_sha_ni());
  return sha256_extensions();
}

void Sha256::blocks(const uint8_t* p, size_t count) {
  if (sha256_extensions()) return blocks_sha_ni(state_, p, count);
  for (size_t i = 0; i < count; ++i) block_portable(state_, p + 64 * i);
}

void Sha256::update(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_bytes_ += bytes;
  if (buffered_ > 0) {
    const size_t take = std::min(bytes, size_t{64} - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take; p += take; bytes -= take;
    if (buffered_ < 64) return;
    blocks(buffer_.data(), 1);
    buffered_ = 0;
  }
  blocks(p, bytes / 64);
  p += bytes / 64 * 64;
  bytes %= 64;
  std::memcpy(buffer_.data(), p, bytes);
  buffered_ = bytes;
}

std::string Sha256::hex() {
  const uint64_t bits = total_bytes_ * 8;  // §5.1.1: 0x80, zeros to 56 mod 64, the length big-endian
  const uint8_t one = 0x80, zero = 0;
  update(&one, 1);
  while (buffered_ != 56) update(&zero, 1);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(length, 8);
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint32_t v : state_)
    for (int shift = 28; shift >= 0; shift -= 4) out += digits[(v >> shift) & 0xf];
  return out;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.hex();
}

namespace {

// The SHA-256 of the file open as fd, read from its start in pieces; on_piece(n) after each.
// An Io error when it cannot be read or its size is not `f.bytes` (changed while hashed).
std::string hash_file(int fd, const FileDigest& f, std::vector<char>& piece, const std::function<void(int64_t)>& on_piece) {
  Sha256 h;
  int64_t read_bytes = 0;
  for (;;) {
    const ssize_t n = ::read(fd, piece.data(), piece.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      fail(ErrorKind::Io, "cannot read " + f.path + " for its sha256: " + std::strerror(e));
    }
    if (n == 0) break;
    h.update(piece.data(), static_cast<size_t>(n));
    read_bytes += n;
    on_piece(n);
  }
  if (read_bytes != f.bytes)
    fail(ErrorKind::Io, f.path + " changed while its sha256 was taken (" + std::to_string(f.bytes) + " bytes, then " +
                            std::to_string(read_bytes) + ")");
  return h.hex();
}

}  // namespace

// The files are hashed side by side, one per core (a checkpoint is several shards: 4 of about
// 0.5 GB at Kimi width in bench_eval, 2.0-2.9 s on one core of the AVX2 EPYC); each file's digest
// is its own, so the order does not matter. The progress line is updated by the calling thread.
std::vector<FileDigest> file_digests(const std::vector<std::string>& paths,
                                     const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<FileDigest> out;
  int64_t total = 0;
  std::vector<int> fds;
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  for (const std::string& path : paths) {  // open all first: the total for the progress line
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      close_all();
      fail(ErrorKind::Io, "cannot read " + path + " for its sha256: " + std::strerror(e));
    }
    fds.push_back(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // (a directory's SEEK_END can be INT64_MAX)
      close_all();
      fail(ErrorKind::Io, "cannot read " + path + " for its sha256: not a regular file");
    }
    out.push_back({path, static_cast<int64_t>(st.st_size), ""});
    total += out.back().bytes;
  }
  const int workers = static_cast<int>(
      std::clamp<size_t>(std::thread::hardware_concurrency(), 1, std::max<size_t>(paths.size(), 1)));
  std::atomic<int64_t> done{0};
  std::vector<std::vector<char>> pieces(static_cast<size_t>(workers));  // [worker] its read buffer
  try {  // a failing file stops the other workers after their current file (parallel_for)
    parallel_for(static_cast<int64_t>(paths.size()), workers, [&](int64_t i, int worker) {
      std::vector<char>& piece = pieces[static_cast<size_t>(worker)];
      piece.resize(size_t{4} << 20);
      out[static_cast<size_t>(i)].sha256 =
          hash_file(fds[static_cast<size_t>(i)], out[static_cast<size_t>(i)], piece, [&](int64_t n) {
            const int64_t d = done.fetch_add(n) + n;
            if (worker == 0 && progress) progress(std::min(d, total), total);
          });
    });
  } catch (...) {
    close_all();
    throw;
  }
  close_all();
  if (progress) progress(total, total);  // the last pieces may have been another worker's
  return out;
}

void set_command_line(int argc, const char* const* argv) { argv_store().assign(argv, argv + argc); }
const std::vector<std::string>& command_line() { return argv_store(); }
const char* git_revision() { return MLA_GIT_REVISION; }

void write_provenance(JsonWriter& w, const std::vector<FileDigest>* model_files) {
  w.key("versions").begin_object();
  w.key("mla_h2o").value(MLA_VERSION);
  w.key("git_revision").value(git_revision());
  w.key("compiler").value(MLA_COMPILER);
  w.key("cuda_built").value(MLA_HAVE_CUDA != 0);
  w.key("openblas").value(MLA_HAVE_BLAS != 0);
  w.end_object();
  w.key("argv").array(command_line());
  if (model_files) {
    w.key("model_files").begin_array();
    for (const FileDigest& f : *model_files)
      w.begin_object().key("path").value(f.path).key("bytes").value(f.bytes).key("sha256").value(f.sha256).end_object();
    w.end_array();
  }
}

}  // namespace mla
