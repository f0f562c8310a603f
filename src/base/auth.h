// Mutual challenge-response on every tern connection: both ends prove they
// hold the job secret (SipHash-2-4 MAC over a fresh nonce) before any byte of
// payload is trusted.  A stranger is rejected and logged; the secret never
// crosses the wire.
#pragma once
#include <cstdint>

#include "base/socket.h"

namespace tern {

struct Secret { uint8_t key[16]; };

void randomBytes(void* buf, size_t n);
uint64_t sipHash24(const Secret& key, const void* data, size_t n);

// What a connection is for, so a bootstrap connection can never be taken for
// a data connection of the same job.
enum class ConnKind : int32_t { Root = 1, Mesh = 2 };

// Acceptor side, in steps, so one thread can handshake many connections at
// once (base/gate.h): send the challenge, read kAuthProofBytes, verify, send
// the reply.  Nothing here blocks or records an error: a stranger is not a
// failure of ours.
constexpr size_t kAuthHelloBytes = 24, kAuthProofBytes = 40, kAuthReplyBytes = 16;
struct AuthChallenge { uint8_t nonce[16]; };
// A fresh nonce and the hello that carries it.
void authChallenge(AuthChallenge* c, uint8_t hello[kAuthHelloBytes]);
// Checks a proof: nullptr and the reply to send plus the announced rank on
// success, else a short reason for the log ("bad secret", ...).
const char* authVerify(const Secret& s, ConnKind kind, const AuthChallenge& c,
                       const uint8_t proof[kAuthProofBytes], uint8_t reply[kAuthReplyBytes],
                       int* peerRank);
// Connector side (blocking, until d).
ternResult_t authConnect(int fd, const Secret& s, ConnKind kind, int myRank, Deadline d);

}  // namespace tern
