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

// Acceptor side.  On success *peerRank holds the rank the client announced.
ternResult_t authAccept(int fd, const Secret& s, ConnKind kind, Deadline d, int* peerRank);
// Connector side.
ternResult_t authConnect(int fd, const Secret& s, ConnKind kind, int myRank, Deadline d);

}  // namespace tern
