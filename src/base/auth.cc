#include "base/auth.h"

#include <sys/random.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/log.h"

namespace tern {

static constexpr uint64_t kMagic = 0x7465726e41555448ull;  // "ternAUTH"

void randomBytes(void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t k = getrandom(p, n, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      break;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

static inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

uint64_t sipHash24(const Secret& key, const void* data, size_t n) {
  uint64_t k0, k1;
  memcpy(&k0, key.key, 8);
  memcpy(&k1, key.key + 8, 8);
  uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  auto round = [&] {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  };
  const auto* p = static_cast<const uint8_t*>(data);
  size_t full = n / 8 * 8;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m;
    memcpy(&m, p + i, 8);
    v3 ^= m; round(); round(); v0 ^= m;
  }
  uint64_t last = static_cast<uint64_t>(n & 0xff) << 56;
  for (size_t i = 0; i < n - full; ++i) last |= static_cast<uint64_t>(p[full + i]) << (8 * i);
  v3 ^= last; round(); round(); v0 ^= last;
  v2 ^= 0xff;
  round(); round(); round(); round();
  return v0 ^ v1 ^ v2 ^ v3;
}

namespace {
struct Hello { uint64_t magic; uint8_t nonce[16]; };
struct Proof { uint64_t magic; int32_t rank; int32_t kind; uint8_t nonce[16]; uint64_t mac; };
struct Reply { uint64_t mac; int32_t status; int32_t pad; };

struct MacInput { char tag[8]; uint8_t nonce[16]; int32_t rank; int32_t kind; };

uint64_t mac(const Secret& s, const char* tag, const uint8_t* nonce, int32_t rank, int32_t kind) {
  MacInput in{};
  memcpy(in.tag, tag, std::min(sizeof in.tag, strlen(tag)));
  memcpy(in.nonce, nonce, 16);
  in.rank = rank;
  in.kind = kind;
  return sipHash24(s, &in, sizeof in);
}
}  // namespace

static_assert(sizeof(Hello) == kAuthHelloBytes && sizeof(Proof) == kAuthProofBytes &&
                  sizeof(Reply) == kAuthReplyBytes,
              "wire sizes");

void authChallenge(AuthChallenge* c, uint8_t hello[kAuthHelloBytes]) {
  Hello h{kMagic, {}};
  randomBytes(h.nonce, sizeof h.nonce);
  memcpy(c->nonce, h.nonce, sizeof c->nonce);
  memcpy(hello, &h, sizeof h);
}

const char* authVerify(const Secret& s, ConnKind kind, const AuthChallenge& c,
                       const uint8_t proofBytes[kAuthProofBytes], uint8_t replyBytes[kAuthReplyBytes],
                       int* peerRank) {
  Proof proof;
  memcpy(&proof, proofBytes, sizeof proof);
  int32_t k = static_cast<int32_t>(kind);
  if (proof.magic != kMagic) return "does not speak tern";
  if (proof.kind != k) return "wrong kind of tern connection";
  if (proof.mac != mac(s, "tern-c", c.nonce, proof.rank, k)) return "bad secret";
  Reply reply{mac(s, "tern-s", proof.nonce, proof.rank, k), 0, 0};
  memcpy(replyBytes, &reply, sizeof reply);
  *peerRank = proof.rank;
  return nullptr;
}

ternResult_t authConnect(int fd, const Secret& s, ConnKind kind, int myRank, Deadline d) {
  Hello hello;
  TERN_CHECK(recvAll(fd, &hello, sizeof hello, d));
  if (hello.magic != kMagic)
    return setError(ternRemoteError, "the listener does not speak tern");
  int32_t k = static_cast<int32_t>(kind);
  Proof proof{kMagic, myRank, k, {}, 0};
  randomBytes(proof.nonce, sizeof proof.nonce);
  proof.mac = mac(s, "tern-c", hello.nonce, myRank, k);
  TERN_CHECK(sendAll(fd, &proof, sizeof proof, d));
  Reply reply;
  ternResult_t r = recvAll(fd, &reply, sizeof reply, d);
  if (r != ternSuccess)
    return setError(ternRemoteError,
                    "the listener closed the connection during authentication "
                    "(wrong unique id or job secret, or this process answered slower than the "
                    "listener's TERN_HANDSHAKE_TIMEOUT)");
  if (reply.mac != mac(s, "tern-s", proof.nonce, myRank, k))
    return setError(ternRemoteError, "the listener could not prove the job secret");
  return ternSuccess;
}

}  // namespace tern
