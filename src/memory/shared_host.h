// Host memory the ranks of one host can read from each other (ternMemAlloc):
// each allocation is a sealed memfd mapped here, so a peer maps the same
// pages and a transfer out of it is one memcpy by the receiver, where a
// buffer from malloc goes through the shared fifo (two copies) or through
// process_vm_readv (one copy at a third of memcpy's rate on the hosts
// measured; docs/DECISIONS.md, "Shared host allocations").
//
// It travels as a device buffer does over IPC (memory/ipc.h): the sender
// names its allocation in an IpcHandle, the receiver maps it once and
// keeps it mapped.  An allocation the exporter has freed stays readable
// where a peer still maps it (the seals keep its size; nothing faults),
// and a peer drops such mappings when it next opens one (stale()).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "memory/ipc.h"
#include "tern/tern.h"

namespace tern::shared_host {

// ternMemAlloc / ternMemFree (errors through base/error.h).
ternResult_t allocate(void** ptr, size_t size);
ternResult_t release(void* ptr);

// The handle of the allocation that holds p and p's offset in it; false
// when p is not in one made here.  No lock is taken by a process that
// never allocated.
bool exportOf(const void* p, IpcHandle* h, uint64_t* offset);
// A peer's allocation mapped read-only here; nullptr and *why when it cannot be
// (not a host handle, the peer gone or freed it, no permission).
void* open(const IpcHandle& h, std::string* why);
void close(const IpcHandle& h, void* base);
// Whether a host handle opened earlier names memory its exporter has freed
// since (or an exporter that has exited): its mapping only holds memory.
bool stale(const IpcHandle& h);

}  // namespace tern::shared_host
